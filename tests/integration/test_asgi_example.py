"""examples/asgi_service.py served by uvicorn in a real process, driven over real HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def call(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(params=["sqlite", "postgres"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    port = _free_port()
    env = dict(os.environ, JOBFSM_STORE=url, ASGI_WAIT="2", PYTHONPATH=str(REPO))
    log = tmp_path / "uvicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.asgi_service:app", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        until = time.monotonic() + 30
        while True:
            try:
                if call(base + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < until, "the service did not start: " + log.read_text()
            time.sleep(0.1)
        yield base, url
        # stopping the server drains the in-process worker and shuts down cleanly
        # (uvicorn re-raises the signal once it has: the exit status is -SIGTERM)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()
        assert "Application shutdown complete" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_request_submits_once_and_gets_the_result_within_its_wait(
    service: tuple[str, str],
) -> None:
    base, _ = service
    # when: a client posts a quote request, then retries the very same request
    first = call(base + "/quotes", {"symbol": "ACME"})
    again = call(base + "/quotes", {"symbol": "ACME"})

    # then: both get the result of one job (the key comes from the request)
    assert first[0] == 200
    assert first[1]["state"] == "succeeded"
    assert first[1]["result"]["symbol"] == "ACME"
    assert again == first


def test_an_idempotency_key_header_names_the_job(service: tuple[str, str]) -> None:
    base, url = service
    # when: two different bodies come with the same Idempotency-Key
    a = call(base + "/quotes", {"symbol": "ABC"}, {"Idempotency-Key": "req-42"})
    b = call(base + "/quotes", {"symbol": "XYZ"}, {"Idempotency-Key": "req-42"})

    # then: the second is the first job; one job is stored
    assert a[1]["id"] == b[1]["id"]
    assert b[1]["result"]["symbol"] == "ABC"
    engine = Engine(open_store(url))
    try:
        assert sum(engine.counts().values()) == 1
    finally:
        engine.store.close()


def test_a_slow_job_answers_202_then_its_address_has_the_result(
    service: tuple[str, str],
) -> None:
    base, _ = service
    # when: the job takes longer (3 s) than the request waits (2 s)
    status, body = call(base + "/quotes", {"symbol": "SLOW", "latency": 3})

    # then: 202 with the job, and the job's address shows the result once done
    assert status == 202
    assert body["state"] == "running"
    until = time.monotonic() + 20
    while call(f"{base}/jobs/{body['id']}")[1]["state"] != "succeeded":
        assert time.monotonic() < until
        time.sleep(0.1)
    assert call(f"{base}/jobs/{body['id']}")[1]["result"]["symbol"] == "SLOW"


def test_bad_requests_are_refused_and_nothing_is_stored(service: tuple[str, str]) -> None:
    base, url = service
    assert call(base + "/quotes", {"nothing": 1})[0] == 400
    assert call(base + "/jobs/nope")[0] == 404
    engine = Engine(open_store(url))
    try:
        assert sum(engine.counts().values()) == 0
    finally:
        engine.store.close()


# --- hostile and careless clients (issue 32 item 6) -----------------------------------


def _raw(base: str, data: bytes, *, source: str = "127.0.0.1") -> tuple[int, Any]:
    """Send raw bytes from `source`, read the whole answer: (status, decoded JSON body)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0)) as s:
        # answered and closed before reading all we sent: what a limit does
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body) if body.startswith(b"{") else None


def _post(body: bytes, *headers: str) -> bytes:
    lines = ["POST /quotes HTTP/1.1", "Host: x", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _stored(url: str) -> int:
    engine = Engine(open_store(url))
    try:
        return sum(engine.counts().values())
    finally:
        engine.store.close()


@pytest.mark.parametrize("length", ["²", "+5", "-1", "1e3", "0x10"])
def test_a_content_length_that_is_not_a_decimal_count_is_a_400(
    service: tuple[str, str], length: str
) -> None:
    base, url = service
    status, body = _raw(base, _post(b'{"symbol": "A"}', f"Content-Length: {length}"))
    assert status == 400, body
    assert _stored(url) == 0


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(
    service: tuple[str, str],
) -> None:
    base, url = service
    # a client declares 400 MB and sends only the head: the answer comes without the body
    status, body = _raw(base, _post(b"", "Content-Length: 400000000"))
    assert status == 413
    assert "body over" in body["error"]
    assert _stored(url) == 0


def test_a_chunked_upload_is_answered_at_the_limit_before_it_ends(
    service: tuple[str, str],
) -> None:
    base, url = service
    host, port = base.removeprefix("http://").split(":")
    # given an upload with no length, 20 KiB sent in 1 KiB chunks and never finished
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_post(chunk * 20, "Transfer-Encoding: chunked"))
        # then the answer comes at the 16 KiB limit, without waiting for the rest
        head = s.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert _stored(url) == 0


def test_json_nested_deeper_than_the_parser_goes_is_a_400(service: tuple[str, str]) -> None:
    base, url = service
    nested = b"[" * 5000 + b"]" * 5000
    status, body = _raw(base, _post(nested, f"Content-Length: {len(nested)}"))
    assert status == 400, body
    assert "nested too deep" in body["error"]
    assert _stored(url) == 0


@pytest.mark.parametrize("latency", [3600, -1, "nan", "x"])
def test_a_latency_beyond_the_cap_is_refused(service: tuple[str, str], latency: Any) -> None:
    base, url = service
    status, body = call(base + "/quotes", {"symbol": "A", "latency": latency})
    assert status == 400, body
    assert "latency" in body["error"]
    assert _stored(url) == 0


def test_an_idempotency_key_names_a_job_of_its_own_client_only(service: tuple[str, str]) -> None:
    base, url = service
    # given two clients (two loopback addresses) sending the same Idempotency-Key
    one = json.dumps({"symbol": "ONE"}).encode()
    two = json.dumps({"symbol": "TWO"}).encode()
    key = "Idempotency-Key: shared-7"
    a = _raw(base, _post(one, key, f"Content-Length: {len(one)}"), source="127.0.0.1")
    b = _raw(base, _post(two, key, f"Content-Length: {len(two)}"), source="127.0.0.2")
    # then each gets its own job: the second client never sees the first one's result
    assert a[1]["id"] != b[1]["id"]
    assert b[1]["result"]["symbol"] == "TWO"
    assert _stored(url) == 2
