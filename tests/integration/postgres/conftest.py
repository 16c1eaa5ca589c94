"""Fixtures of the PostgreSQL store tests: admin SQL on the test database and a TCP
proxy that really breaks connections at a chosen statement (no mocks)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from adapters.postgres import open_store
from tests.conftest import need_program

_SSL_OR_GSS = (80877103, 80877104)


class FaultProxy:
    """A TCP proxy in front of PostgreSQL that can break a connection for real.

    `arm(pattern, mode)` acts once, on the first client message (simple Query or
    Parse) whose SQL contains `pattern`:

    - "drop": the message never reaches the server; both sockets are closed.
    - "deliver_then_drop": the message (and what the client sends after it) is
      delivered, the server's answers are swallowed, and after `settle` seconds
      both sockets are closed: the server finished the statement (and its commit)
      but the client never hears of it.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.fired = threading.Event()
        self._pattern: bytes | None = None
        self._mode = ""
        self._settle = 0.5
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, pattern: bytes, mode: str, settle: float = 0.5) -> None:
        assert mode in ("drop", "deliver_then_drop")
        with self._lock:
            self._pattern, self._mode, self._settle = pattern, mode, settle
            self.fired.clear()

    def _take(self, message: bytes) -> str | None:
        with self._lock:
            if self._pattern is None or message[:1] not in (b"Q", b"P"):
                return None
            if self._pattern not in message:
                return None
            self._pattern = None
            return self._mode

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            muted = threading.Event()
            threading.Thread(
                target=self._client_to_server, args=(client, server, muted), daemon=True
            ).start()
            threading.Thread(
                target=self._server_to_client, args=(server, client, muted), daemon=True
            ).start()

    def _server_to_client(self, server: socket.socket, client: socket.socket, muted: Any) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if not muted.is_set():
                    client.sendall(data)
        _close(client, server)

    def _client_to_server(self, client: socket.socket, server: socket.socket, muted: Any) -> None:
        buf = b""
        startup = True

        def need(n: int) -> bool:
            nonlocal buf
            while len(buf) < n:
                data = client.recv(65536)
                if not data:
                    return False
                buf += data
            return True

        with contextlib.suppress(OSError):
            while True:
                if startup:
                    if not need(4):
                        break
                    size = struct.unpack("!I", buf[:4])[0]
                    if not need(size):
                        break
                    message, buf = buf[:size], buf[size:]
                    code = struct.unpack("!I", message[4:8])[0] if size >= 8 else 0
                    startup = code in _SSL_OR_GSS
                    server.sendall(message)
                    continue
                if not need(5):
                    break
                size = struct.unpack("!I", buf[1:5])[0]
                if not need(size + 1):
                    break
                message, buf = buf[: size + 1], buf[size + 1 :]
                mode = self._take(message)
                if mode == "drop":
                    self.fired.set()
                    break
                if mode == "deliver_then_drop":
                    muted.set()
                    server.sendall(message + buf)
                    buf = b""
                    timer = threading.Timer(self._settle, self._cut, args=(client, server))
                    timer.daemon = True
                    timer.start()
                    continue
                server.sendall(message)
        _close(client, server)

    def _cut(self, client: socket.socket, server: socket.socket) -> None:
        # fired before the cut: the client sees the broken connection as soon as the
        # sockets close, and may assert `fired` before this thread runs another line
        self.fired.set()
        _close(client, server)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for s in self._sockets:
            _close(s)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[tuple[FaultProxy, str]]:
    """A fault proxy and the store URL that reaches the test database through it."""
    parts = urlsplit(pg_url)
    proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    user = parts.username or "postgres"
    try:
        yield proxy, f"postgresql://{user}@127.0.0.1:{proxy.port}{parts.path}?sslmode=disable"
    finally:
        proxy.close()


class Admin:
    """Plain SQL on the test database from a separate connection (the 'other host')."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)

    def run(self, sql: str, *params: Any) -> None:
        self.conn.execute(sql, params or None)

    def one(self, sql: str, *params: Any) -> Any:
        row = self.conn.execute(sql, params or None).fetchone()
        return None if row is None else row[0]

    def all(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params or None).fetchall()

    def wait_for(self, sql: str, *params: Any, timeout: float = 10.0) -> Any:
        """Poll `sql` until it returns a non-empty first value; fail after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.one(sql, *params)
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f"{sql!r} returned nothing within {timeout} s")


@pytest.fixture
def admin(pg_url: str) -> Iterator[Admin]:
    a = Admin(pg_url)
    try:
        yield a
    finally:
        a.conn.close()


@pytest.fixture(scope="module")
def pg_module_url(pg_server: str) -> Iterator[str]:
    """One fresh database for a whole test module, dropped afterwards."""
    name = f"jobfsm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{pg_server.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_schema_url(pg_module_url: str) -> str:
    """A store URL with a schema of its own (created on first open) in the module's database."""
    return f"{pg_module_url}?schema=t_{uuid.uuid4().hex[:12]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pgbouncer(pg_url: str) -> Iterator[Callable[[bool], str]]:
    """Start a real PgBouncer in transaction pooling mode in front of the test database;
    returns the store URL through it. `round_robin`: hand server sessions out in turn."""
    need_program("pgbouncer", "apt-get install pgbouncer")
    parts = urlsplit(pg_url)
    db = parts.path.lstrip("/")
    procs: list[subprocess.Popen[bytes]] = []
    work = Path(tempfile.mkdtemp(prefix="jobfsm-pgbouncer-"))
    os.chmod(work, 0o755)  # pgbouncer refuses to run as root: it runs as nobody then

    def start(round_robin: bool) -> str:
        port = _free_port()
        config = work / f"{port}.ini"
        config.write_text(
            f"[databases]\n{db} = host={parts.hostname} port={parts.port} dbname={db} "
            f"user={parts.username or 'postgres'}\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
            "unix_socket_dir =\nauth_type = any\npool_mode = transaction\n"
            f"server_round_robin = {int(round_robin)}\ndefault_pool_size = 4\n"
        )
        os.chmod(config, 0o644)
        command = ["pgbouncer", "-q", str(config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
        procs.append(subprocess.Popen(command, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "pgbouncer did not start"
                time.sleep(0.05)
        return f"postgresql://postgres@127.0.0.1:{port}/{db}?migrate=false&pool_min=0"

    try:
        open_store(pg_url).close()  # migrate directly, not through the proxy
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
