"""A TCP relay between this process's AMQP clients and a broker, for broker faults that
touch only the connections of the run that asks for them.

Closing connections on the broker itself (rabbitmqctl's closing of all connections, or
stopping its application) drops every client of the broker, other applications'
included, and needs `rabbitmqctl` on the broker's machine. The tests and
`jobfsm faults --delivery` connect their clients through a `Relay` instead
(`relay.url`), and the relay acts on the connections that pass through it, no other:

- `force_close()`: each client receives the `connection.close` a broker sends when an
  operator closes a connection (reply code 320, CONNECTION_FORCED), and the relay drops
  the broker's side at once: the broker requeues whatever the connection held unacked,
  exactly as after an operator's close.
- `cut()`: both sides dropped without a word, as a network cut does.
- `outage()`: a broker that is down: connections force-closed (as a stopping broker
  closes them) and the relay's port closed, so that new connections are refused until
  the block's `start()` or its end.
- `backend_down()`: a load balancer whose backend is down: connections force-closed,
  then each new connection accepted and closed at once, before any byte (pika reports
  that as an incompatible protocol), until the block's end.
- `partition()`: a silent network partition: nothing is forwarded either way and
  nothing is closed (new connections are accepted and get no answer either), until the
  block's end; then what waited in the sockets' buffers flows again, as TCP's
  retransmissions deliver it after a partition heals.

Frames from the broker are forwarded whole, so a close is sent between two frames. An
`amqps://` URL is served too: the relay speaks TLS to the broker (with the URL's TLS
options and host name, verified as the client would) and plain AMQP to the client, on
127.0.0.1 only.

A relay checks at once that it reaches the broker (and, for amqps://, that the broker's
certificate verifies): `Relay(url)` raises `DeliveryFailed` naming the cause otherwise.
A broker that becomes unreachable later closes the client's connection during its
handshake, which pika reports as an incompatible protocol: the relay is for tests and
fault runs against a broker that is up, not for production traffic.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fsm.errors import BadInput
from fsm.secrets import query_pairs, split_url

from ._pika import pika
from .errors import DeliveryFailed
from .url import check_url, redact

log = logging.getLogger(__name__)

#: reply code and text of the close an operator's `close_connection` sends
FORCED = 320
FORCED_TEXT = "CONNECTION_FORCED - closed by the jobfsm fault relay"
#: how long a force-closed client may take to answer close-ok before its socket is dropped
CLOSE_GRACE = 5.0
#: a frame larger than this is not AMQP 0-9-1 as brokers send it: relayed without framing
MAX_FRAME = 1 << 24
#: how often a link looks for a close or cut request while both sides are idle
TICK = 0.05
#: bound of connecting to the broker (one attempt)
CONNECT_TIMEOUT = 10.0
_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size; then payload, 0xCE


def close_frame(code: int = FORCED, text: str = FORCED_TEXT) -> bytes:
    """The `connection.close` method frame (class 10, method 50) a broker sends."""
    reason = text.encode()[:255]
    payload = struct.pack(">HHHB", 10, 50, code, len(reason)) + reason + struct.pack(">HH", 0, 0)
    return _HEADER.pack(1, 0, len(payload)) + payload + b"\xce"


def split_frames(buffer: bytearray) -> bytes | None:
    """The complete frames at the head of `buffer` (removed from it); None when the bytes
    are not frames (a protocol-header reply, or a size no broker sends)."""
    end = 0
    while len(buffer) - end >= _HEADER.size:
        _kind, _channel, size = _HEADER.unpack_from(buffer, end)
        if buffer[end : end + 4] == b"AMQP" or size > MAX_FRAME:
            return None
        stop = end + _HEADER.size + size + 1
        if len(buffer) < stop:
            break
        end = stop
    head = bytes(buffer[:end])
    del buffer[:end]
    return head


class _Link:
    """One client connection and its broker connection, served by one thread."""

    def __init__(
        self, client: socket.socket, broker: socket.socket, silent: threading.Event
    ) -> None:
        self.client = client
        self.broker: socket.socket | None = broker
        self.silent = silent  # set while the relay simulates a partition: forward nothing
        self.relayed = [0, 0]  # bytes forwarded: client to broker, broker to client
        self.request: str | None = None  # "close" or "cut", set by the relay
        self.acted = threading.Event()  # the request was carried out (or the link ended)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="amqp-relay-link", daemon=True)

    def _serve(self) -> None:
        pending = bytearray()
        framed = True
        closed_at: float | None = None
        try:
            while True:
                if self.request == "cut":
                    return
                if self.request == "close" and closed_at is None:
                    self._drop_broker()
                    closed_at = time.monotonic()
                    self.client.sendall(close_frame())
                    self.acted.set()
                if closed_at is not None and time.monotonic() - closed_at > CLOSE_GRACE:
                    return
                if self.silent.is_set() and closed_at is None:
                    time.sleep(TICK)  # partitioned: bytes wait in the socket buffers
                    continue
                sockets = [self.client] if self.broker is None else [self.client, self.broker]
                pended = self.broker if isinstance(self.broker, ssl.SSLSocket) else None
                if pended is not None and pended.pending():
                    readable: list[Any] = [pended]
                else:
                    readable = select.select(sockets, [], [], TICK)[0]
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is self.client:
                        if self.broker is not None:  # after a close: the client's close-ok
                            self.broker.sendall(data)
                            self.relayed[0] += len(data)
                        continue
                    if framed:
                        pending += data
                        whole = split_frames(pending)
                        if whole is None:
                            framed, data = False, bytes(pending)
                            pending.clear()
                        else:
                            data = whole
                    self.client.sendall(data)
                    self.relayed[1] += len(data)
        except OSError:  # either side went away: the link ends as the broker's would
            return
        finally:
            self._drop_broker()
            with contextlib.suppress(OSError):
                self.client.close()
            self.acted.set()
            self.done.set()

    def _drop_broker(self) -> None:
        broker, self.broker = self.broker, None
        if broker is not None:
            with contextlib.suppress(OSError):
                broker.close()


class Relay:
    """A relay to the broker of `url` on 127.0.0.1; clients use `relay.url`."""

    def __init__(self, url: str) -> None:
        url = check_url(url)
        params = pika.URLParameters(url)
        self.target = (params.host, params.port)
        self._tls: tuple[ssl.SSLContext, str] | None = None
        if params.ssl_options is not None:
            options = params.ssl_options
            self._tls = (options.context, options.server_hostname or params.host)
        try:
            self._connect().close()
        except OSError as err:  # ssl.SSLError, refused, DNS: named, nothing started
            raise DeliveryFailed(
                f"the fault relay cannot reach the broker at {redact(url)}: "
                f"{type(err).__name__}: {err}"
            ) from err
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._closed = False
        self._port = 0
        self._rejecting = False  # backend_down(): accept, then close before any byte
        self._silent = threading.Event()  # partition(): forward nothing, close nothing
        self._relayed = [0, 0]  # bytes of ended links, client to broker and back
        self.connections = 0  # client connections relayed so far
        self.rejected = 0  # connections accepted and closed by backend_down()
        self._listen(0)
        self.url = _client_url(url, self.port)
        log.debug("relay 127.0.0.1:%d -> %s", self.port, redact(url))

    # --- faults ----------------------------------------------------------------------

    def force_close(self) -> int:
        """Send each relayed client the broker's forced close; return how many."""
        return self._end("close")

    def cut(self) -> int:
        """Drop each relayed connection at once, both sides; return how many."""
        return self._end("cut")

    @contextlib.contextmanager
    def outage(self) -> Iterator[Callable[[], None]]:
        """The broker is down for the block: connections force-closed, new ones refused.
        Yields `start`, which brings the broker back early; the block's end always does."""
        self.stop()
        try:
            yield self.start
        finally:
            self.start()

    @contextlib.contextmanager
    def backend_down(self) -> Iterator[None]:
        """A load balancer whose backend is down, for the block: connections force-closed,
        then every new one accepted and closed at once, before any byte."""
        self._rejecting = True
        try:
            self.force_close()
            yield
        finally:
            self._rejecting = False

    @contextlib.contextmanager
    def partition(self) -> Iterator[None]:
        """A silent network partition, for the block: no byte forwarded either way,
        no connection closed, new connections accepted and left unanswered."""
        self._silent.set()
        try:
            yield
        finally:
            self._silent.clear()

    @property
    def relayed(self) -> tuple[int, int]:
        """Bytes forwarded so far: (client to broker, broker to client)."""
        with self._lock:
            links = list(self._links)
            ended = list(self._relayed)
        return (
            ended[0] + sum(k.relayed[0] for k in links),
            ended[1] + sum(k.relayed[1] for k in links),
        )

    def stop(self) -> None:
        """Close the relay's port (new connections are refused) and force-close the rest."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join(5)
        self.force_close()

    def start(self) -> None:
        """Listen again, on the same port (clients keep their URL)."""
        with self._lock:
            if self._listener is not None or self._closed:
                return
        self._listen(self.port)

    def close(self) -> None:
        """Stop listening and cut every connection."""
        self._closed = True
        self.stop()
        self.cut()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- serving ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    def _listen(self, port: int) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError as err:
            listener.close()
            raise RuntimeError(
                f"the relay could not listen on 127.0.0.1:{port} again: {err}"
            ) from err
        listener.listen(64)
        listener.settimeout(TICK)
        self._port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._accepting = threading.Thread(
            target=self._accept, args=(listener,), name="amqp-relay", daemon=True
        )
        self._accepting.start()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _address = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by stop()
                return
            if self._rejecting:  # a balancer with no backend: accepted, then closed
                with contextlib.suppress(OSError):
                    client.close()
                with self._lock:
                    self.rejected += 1
                continue
            try:
                broker = self._connect()
            except OSError as err:  # the client meets a refused broker, as without us
                log.debug("relay: broker unreachable: %s", err)
                client.close()
                continue
            client.settimeout(None)
            link = _Link(client, broker, self._silent)
            with self._lock:
                for ended in [k for k in self._links if k.done.is_set()]:
                    self._relayed[0] += ended.relayed[0]
                    self._relayed[1] += ended.relayed[1]
                self._links = [k for k in self._links if not k.done.is_set()]
                self._links.append(link)
                self.connections += 1
            link.thread.start()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
        if self._tls is not None:
            context, hostname = self._tls
            sock = context.wrap_socket(sock, server_hostname=hostname)
        sock.settimeout(CONNECT_TIMEOUT)  # a stalled TLS record may not block a link forever
        return sock

    def _end(self, request: str) -> int:
        with self._lock:
            links = [k for k in self._links if not k.done.is_set()]
        for link in links:
            link.request = request
        for link in links:  # a close is sent within a tick; the client answers in its time
            (link.done if request == "cut" else link.acted).wait(CLOSE_GRACE)
        return len(links)


def _client_url(url: str, port: int) -> str:
    """`url` pointed at the relay: amqp:// on 127.0.0.1:`port`, its user, vhost and options
    kept, its TLS options left out (the relay speaks TLS to the broker)."""
    parts = split_url(url)
    if parts is None:  # check_url accepted it: cannot happen
        raise BadInput(f"RabbitMQ url {redact(url)} has no scheme")
    _host, slash, path = parts.host_and_path.partition("/")
    query = "&".join(
        f"{name}{eq}{value}"
        for name, eq, value in query_pairs(parts.query or "")
        if name.lower() != "ssl_options"
    )
    user = f"{parts.userinfo}@" if parts.userinfo is not None else ""
    tail = f"?{query}" if query else ""
    return f"amqp://{user}127.0.0.1:{port}{slash}{path}{tail}"


__all__ = ["FORCED", "Relay", "close_frame", "split_frames"]
