"""examples/asgi_service.py served by uvicorn in a real process, driven over real HTTP."""

from __future__ import annotations

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
