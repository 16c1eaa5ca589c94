"""examples/service.py under careless and hostile HTTP clients: real requests on a real socket.

Every answer is JSON with a 4xx/5xx status, the body limit holds whatever Content-Length
says, a stalled client is cut off, and the server keeps answering afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples import service
from fsm import Engine
from fsm.registry import open_store

from ._cli import ROOT


@pytest.fixture
def server(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int, Engine]]:
    monkeypatch.setattr(service, "SOCKET_TIMEOUT", 0.5)
    engine = Engine(open_store(sqlite_url))
    srv = service.make_server(engine, 0)
    thread = threading.Thread(target=srv.serve_forever, name="test-http", daemon=True)
    thread.start()
    host, port = str(srv.server_address[0]), int(srv.server_address[1])
    try:
        yield host, port, engine
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)
        engine.store.close()


def _raw(host: str, port: int, data: bytes, *, timeout: float = 5.0) -> tuple[int, Any]:
    """Send raw bytes, read the whole answer: (status, decoded JSON body)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    answer = b"".join(chunks)
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"Content-Type: application/json" in head, answer
    return status, json.loads(body)


def _post(host: str, port: int, body: bytes, length: str | None) -> tuple[int, Any]:
    headers = "POST /signups HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if length is not None:
        headers += f"Content-Length: {length}\r\n"
    return _raw(host, port, headers.encode() + b"\r\n" + body)


def _still_serving(host: str, port: int) -> None:
    status, body = _post(host, port, b'{"email": "ada@example.com"}', "28")
    assert status == 202, body
    assert body["state"] == "queued"


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "+5", " ", "0x10"])
def test_a_content_length_that_is_not_a_decimal_count_is_a_400(
    server: tuple[str, int, Engine], length: str
) -> None:
    host, port, engine = server

    status, body = _post(host, port, b'{"email": "a@b.c"}' + b" " * 1000, length)

    assert status == 400
    assert "Content-Length" in body["error"]
    assert engine.counts() == {}
    _still_serving(host, port)


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    server: tuple[str, int, Engine],
) -> None:
    host, port, engine = server

    status, _body = _post(host, port, b"", str(service.MAX_BODY + 1))

    assert status == 413
    assert engine.counts() == {}
    _still_serving(host, port)


def test_a_missing_content_length_is_a_411(server: tuple[str, int, Engine]) -> None:
    host, port, _ = server

    status, _body = _post(host, port, b"", None)

    assert status == 411


@pytest.mark.parametrize(
    "body",
    [b"{oops", b"[1, 2]", b'{"email": 5}', b'{"email": ""}', b"\xff\xfe", b"[" * 60_000],
)
def test_a_body_that_is_not_a_signup_is_a_400(server: tuple[str, int, Engine], body: bytes) -> None:
    host, port, engine = server

    status, answer = _post(host, port, body, str(len(body)))

    assert status == 400
    assert answer["error"]
    assert engine.counts() == {}


def test_a_stalled_client_is_cut_off_with_a_408(server: tuple[str, int, Engine]) -> None:
    host, port, _ = server
    head = b"POST /signups HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"

    status, body = _raw(host, port, head + b'{"em', timeout=10)

    assert status == 408
    assert body == {"error": "request timed out"}
    _still_serving(host, port)


def test_protocol_errors_and_unknown_methods_are_json(server: tuple[str, int, Engine]) -> None:
    host, port, _ = server

    many = b"".join(b"X-%d: y\r\n" % i for i in range(200))
    garbage = _raw(host, port, b"GET /jobs/x HTTP/1.1\r\n" + many + b"\r\n")
    method = _raw(host, port, b"DELETE /jobs/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    unknown = _raw(host, port, b"GET /jobs/NOPE HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    assert garbage[0] == 431  # too many headers
    assert method[0] == 501
    assert unknown[0] == 404
    assert "NOPE" in unknown[1]["error"]


def test_an_unexpected_error_is_a_json_500_and_the_server_goes_on(
    server: tuple[str, int, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port, engine = server

    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(engine, "submit", broken)
    status, body = _post(host, port, b'{"email": "a@b.c"}', "18")
    monkeypatch.undo()

    assert status == 500
    assert body == {"error": "internal error"}
    assert "secret" not in json.dumps(body)
    _still_serving(host, port)


def test_the_selftest_leaves_no_temporary_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBFSM_STORE", "EXAMPLE_OUTBOX")}
    env["TMPDIR"] = str(tmp_path)

    done = subprocess.run(
        [sys.executable, "-m", "examples.service", "--selftest"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert str(tmp_path) in done.stdout  # it did use the directory
    assert list(tmp_path.iterdir()) == []
