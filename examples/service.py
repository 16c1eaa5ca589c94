"""A tiny HTTP service that embeds the engine and runs a worker in-process.

    python -m examples.service --store sqlite:///service.db --port 8080
    curl -X POST localhost:8080/signups -d '{"email": "ada@example.com"}'
    curl localhost:8080/jobs/<id>

    python -m examples.service --selftest     # start, submit, wait, print, exit

POST /signups submits a welcome email job with an idempotency key, so a client
retrying the request does not queue a second email. SIGTERM drains the worker.

Every answer is JSON, errors included: 400 for a malformed request or body, 411/413
for a missing or oversized body (at most MAX_BODY bytes are read), 404, 408 when a
client stalls longer than SOCKET_TIMEOUT, 503 when the store is unavailable and 500
for anything else (logged here; the client never sees a traceback).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fsm import BadInput, Engine, JobFSMError, JobNotFound
from fsm.registry import open_store
from fsm.worker import Worker

from .app import OUTBOX_ENV
from .app import worker as app_handlers

log = logging.getLogger("examples.service")

#: largest request body the service reads
MAX_BODY = 64 * 1024
#: seconds a client may stall on one read or write before its connection is closed
SOCKET_TIMEOUT = 10.0


class _Refused(Exception):
    """A request answered with `status` and a JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body: Content-Length must be a decimal number from 0 to MAX_BODY."""
    raw = handler.headers.get("Content-Length")
    if raw is None:
        raise _Refused(411, "Content-Length required")
    if not raw.strip().isdigit():  # refuses "-1", "+5", "1e3", "0x10", ""
        raise _Refused(400, "Content-Length must be a non-negative decimal number")
    length = int(raw)
    if length > MAX_BODY:
        raise _Refused(413, f"body over {MAX_BODY} bytes")
    body = handler.rfile.read(length)
    if len(body) != length:
        raise _Refused(400, "body shorter than its Content-Length")
    return body


def _signup_email(body: bytes) -> str:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:  # bad JSON, bad UTF-8, absurd nesting
        raise _Refused(400, "body is not valid JSON") from err
    email = data.get("email") if isinstance(data, dict) else None
    if not isinstance(email, str) or not email:
        raise _Refused(400, 'body must be a JSON object with an "email" string')
    return email


def make_server(engine: Engine, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT  # applied to the connection's socket by StreamRequestHandler

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """The server's own errors (bad request line, unknown method...) as JSON too."""
            try:
                self._send(code, {"error": message or self.responses.get(code, ("error",))[0]})
            except OSError:
                self.close_connection = True

        def _answer(self, route: Any) -> None:
            try:
                status, body = route()
            except _Refused as err:
                status, body = err.status, {"error": str(err)}
            except TimeoutError:
                status, body = 408, {"error": "request timed out"}
            except JobNotFound as err:
                status, body = 404, {"error": str(err)}
            except BadInput as err:
                status, body = 400, {"error": str(err)}
            except JobFSMError:
                log.exception("store error on %s %s", self.command, self.path)
                status, body = 503, {"error": "job store unavailable, try again"}
            except Exception:
                log.exception("unexpected error on %s %s", self.command, self.path)
                status, body = 500, {"error": "internal error"}
            try:
                self._send(status, body)
            except OSError:  # the client went away: nothing to answer
                self.close_connection = True

        def do_POST(self) -> None:
            self._answer(self._post)

        def do_GET(self) -> None:
            self._answer(self._get)

        def _post(self) -> tuple[int, Any]:
            if self.path != "/signups":
                return 404, {"error": "not found"}
            email = _signup_email(_read_body(self))
            # keys are printable text: hash what the client sends
            key = "welcome:" + hashlib.sha256(email.encode("utf-8", "replace")).hexdigest()[:32]
            job = engine.submit("email.welcome", {"email": email}, idempotency_key=key)
            return 202, {"job": job.id, "state": job.state}

        def _get(self) -> tuple[int, Any]:
            if not self.path.startswith("/jobs/"):
                return 404, {"error": "not found"}
            job = engine.get(self.path.removeprefix("/jobs/"))
            return 200, {"id": job.id, "state": job.state, "result": job.result}

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the engine logs every transition already."""

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def _call(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(url, data=data, timeout=10) as resp:
        return json.loads(resp.read())


def selftest(base: str, timeout: float = 30.0) -> int:
    emails = ["ada@example.com", "grace@example.com", "ada@example.com"]  # ada twice
    ids = [_call(f"{base}/signups", {"email": e})["job"] for e in emails]
    assert ids[0] == ids[2], "the idempotency key returns the first job"
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        states = [_call(f"{base}/jobs/{i}")["state"] for i in ids]
        if all(s == "succeeded" for s in states):
            for i in dict.fromkeys(ids):
                print(i, _call(f"{base}/jobs/{i}"))
            return 0
        time.sleep(0.1)
    print("jobs did not finish:", states)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="store URL (default: a temp SQLite file)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--selftest", action="store_true", help="submit jobs, wait, exit")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="jobfsm-example-")
    try:
        return _serve(args, tmp)
    finally:
        if args.selftest:  # its files served the test only; a server keeps its temp store
            shutil.rmtree(tmp, ignore_errors=True)


def _serve(args: argparse.Namespace, tmp: str) -> int:
    outbox = os.path.join(tmp, "outbox.db")
    if args.selftest:
        os.environ[OUTBOX_ENV] = outbox
    else:
        os.environ.setdefault(OUTBOX_ENV, outbox)
    engine = Engine(open_store(args.store or f"sqlite:///{tmp}/service.db"))
    worker = Worker(engine, app_handlers, poll_interval=0.1, install_signals=False)
    server = make_server(engine, 0 if args.selftest else args.port)
    threads = [
        threading.Thread(target=worker.run, name="worker"),
        threading.Thread(target=server.serve_forever, name="http"),
    ]
    for t in threads:
        t.start()

    def stop(*_: object) -> None:
        worker.stop()
        server.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[0], server.server_address[1]
    print(f"listening on http://{host!s}:{port} (files in {tmp})", flush=True)
    code = 0
    if args.selftest:
        try:
            worker.wait_started(10)
            code = selftest(f"http://{host!s}:{port}")
        finally:
            stop()
    for t in threads:
        t.join()
    server.server_close()
    engine.store.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
