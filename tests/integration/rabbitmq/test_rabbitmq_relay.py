"""The fault relay: broker faults on the test's own connections, never on the broker's
other clients (the broker is shared: other applications and other test runs use it)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pika
import pytest
from pika import exceptions as pika_errors

from adapters.memory import MemoryStore
from adapters.rabbitmq import DeliveryFailed, RabbitDelivery
from adapters.rabbitmq.relay import FORCED, Relay, close_frame, split_frames
from adapters.rabbitmq.testing import AmqpFaultModel
from fsm import Engine

from .helpers import TEST_QUEUES, delete_broker_names


def _connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    return pika.BlockingConnection(params)


@contextlib.contextmanager
def _bystander(rabbit_url: str) -> Iterator[pika.BlockingConnection]:
    """Another client of the broker, connected directly: no fault may touch it."""
    conn = _connect(rabbit_url)
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


def _alive(conn: pika.BlockingConnection) -> bool:
    conn.process_data_events(time_limit=0.2)
    channel = conn.channel()  # a round trip to the broker
    channel.close()
    return conn.is_open


def test_force_close_gives_relayed_clients_the_brokers_320_and_leaves_others_open(
    rabbit_url: str, relay: Relay
) -> None:
    with _bystander(rabbit_url) as other:
        relayed = _connect(relay.url)
        # when the relay force-closes its connections
        assert relay.force_close() == 1
        # then the relayed client got the close an operator's close sends
        with pytest.raises(pika_errors.ConnectionClosedByBroker) as closed:
            relayed.process_data_events(time_limit=2.0)
        assert closed.value.reply_code == FORCED
        # and the broker's other client is untouched
        assert _alive(other)


def test_cut_drops_relayed_connections_without_a_word_and_leaves_others_open(
    rabbit_url: str, relay: Relay
) -> None:
    with _bystander(rabbit_url) as other:
        relayed = _connect(relay.url)
        assert relay.cut() == 1
        with pytest.raises(pika_errors.StreamLostError):
            relayed.process_data_events(time_limit=2.0)
        assert _alive(other)


def test_an_outage_refuses_new_connections_until_it_ends_on_the_same_url(
    rabbit_url: str, relay: Relay
) -> None:
    with _bystander(rabbit_url) as other:
        with relay.outage():
            # during the outage the relay's port is closed: refused, as a stopped broker
            with pytest.raises(pika_errors.AMQPConnectionError):
                _connect(relay.url)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", relay.port), timeout=2).close()
            assert _alive(other)
        # then the same URL works again afterwards
        again = _connect(relay.url)
        assert _alive(again)
        again.close()


def test_the_fault_models_connection_closes_touch_no_other_client_of_the_broker(
    rabbit_url: str,
) -> None:
    # given another application's connection to the same broker
    prefix = f"jobfsm.f{uuid.uuid4().hex[:10]}."
    engine = Engine(MemoryStore())
    relay = Relay(rabbit_url)
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, recovery_interval=0.5)
    model = AmqpFaultModel(engine, delivery, relay=relay)
    try:
        with _bystander(rabbit_url) as other:
            # when the model closes connections twice between submits
            report = model.run(["submit", "close_connections", "submit", "close_connections"])
            # then its own consumer was force-closed and recovered, and nothing was lost ...
            report.check()
            assert delivery.consumer.stats["failure:closed-320"] == 2, dict(delivery.consumer.stats)
            assert delivery.consumer.stats["recoveries"] == 2
            # ... while the other application's connection stayed open
            assert _alive(other)
    finally:
        delivery_queues = (*TEST_QUEUES,)
        delete_broker_names(rabbit_url, prefix, delivery_queues)


def test_the_fault_model_refuses_a_delivery_that_bypasses_its_relay(rabbit_url: str) -> None:
    engine = Engine(MemoryStore())
    with Relay(rabbit_url) as relay:
        direct = RabbitDelivery(rabbit_url, engine=engine, prefix="jobfsm.never.")
        with pytest.raises(ValueError, match=r"through its relay"):
            AmqpFaultModel(engine, direct, relay=relay)


def test_split_frames_hands_out_whole_frames_only() -> None:
    frame = close_frame()
    buffer = bytearray(frame + frame[:5])
    assert split_frames(buffer) == frame
    assert buffer == bytearray(frame[:5])  # the partial frame waits for its tail
    buffer += frame[5:]
    assert split_frames(buffer) == frame
    assert buffer == bytearray()
    # a protocol-header reply (the broker refusing our version) is not framed
    assert split_frames(bytearray(b"AMQP\x00\x00\x09\x01")) is None


# --- amqps: the relay speaks TLS to the broker ---------------------------------------


@pytest.fixture
def tls_broker(tmp_path: Path, rabbit_url: str) -> Iterator[tuple[int, Path]]:
    """A TLS front of the local broker (what an amqps:// broker is to its clients): a
    self-signed certificate for `localhost`, one thread per connection."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.close()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = server.accept()
            except TimeoutError:
                continue
            # the handshake's bound: generous, a loaded CI machine took more than 5 s
            raw.settimeout(30)
            try:
                client = context.wrap_socket(raw, server_side=True)
            except OSError:  # a client that does not trust us: its own failure to report
                raw.close()
                continue
            client.settimeout(None)
            params = pika.URLParameters(rabbit_url)
            broker = socket.create_connection((params.host, params.port))
            threading.Thread(target=pump, args=(client, broker), daemon=True).start()
            threading.Thread(target=pump, args=(broker, client), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], cert
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_an_amqps_broker_is_reached_over_verified_tls_and_force_closed_the_same_way(
    rabbit_url: str, tls_broker: tuple[int, Path]
) -> None:
    port, cert = tls_broker
    options = quote(repr({"ca_certs": str(cert), "server_hostname": "localhost"}))
    url = f"amqps://guest:guest@127.0.0.1:{port}/%2F?ssl_options={options}"
    with Relay(url) as relay:
        # the client speaks plain AMQP to the relay on the loopback, without TLS options
        assert relay.url == f"amqp://guest:guest@127.0.0.1:{relay.port}/%2F"
        relayed = _connect(relay.url)
        assert _alive(relayed)
        assert relay.force_close() == 1
        with pytest.raises(pika_errors.ConnectionClosedByBroker):
            relayed.process_data_events(time_limit=2.0)


def test_an_amqps_broker_whose_certificate_does_not_verify_is_refused_at_once(
    tls_broker: tuple[int, Path],
) -> None:
    # given a broker certificate that no CA the URL names vouches for (the system's CAs)
    port, _cert = tls_broker
    # when a relay is made for it, then it refuses, naming the cause and hiding the password
    with pytest.raises(DeliveryFailed, match=r"cannot reach the broker.*CERTIFICATE_VERIFY") as err:
        Relay(f"amqps://guest:secret@127.0.0.1:{port}/%2F")
    assert "secret" not in str(err.value)


def test_a_broker_nobody_answers_for_is_refused_at_once() -> None:
    with pytest.raises(DeliveryFailed, match=r"cannot reach the broker.*127\.0\.0\.1:1/"):
        Relay("amqp://guest:guest@127.0.0.1:1/%2F")
