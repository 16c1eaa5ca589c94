"""A tiny HTTP service that embeds the engine and runs a worker in-process.

    python -m examples.service --store sqlite:///service.db --port 8080
    curl -X POST localhost:8080/signups -d '{"email": "ada@example.com"}'
    curl localhost:8080/jobs/<id>

    python -m examples.service --selftest     # start, submit, wait, print, exit

POST /signups submits a welcome email job with an idempotency key, so a client
retrying the request does not queue a second email. SIGTERM drains the worker.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fsm import Engine, JobFSMError, JobNotFound
from fsm.registry import open_store
from fsm.worker import Worker

from .app import OUTBOX_ENV
from .app import worker as app_handlers

#: largest request body the service reads
MAX_BODY = 64 * 1024


def make_server(engine: Engine, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path != "/signups":
                return self._send(404, {"error": "not found"})
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._send(413, {"error": f"body over {MAX_BODY} bytes"})
            try:
                email = str(json.loads(self.rfile.read(length))["email"])
                # keys are [A-Za-z0-9_.:-]: hash what the client sends
                key = "welcome:" + hashlib.sha256(email.encode()).hexdigest()[:32]
                job = engine.submit("email.welcome", {"email": email}, idempotency_key=key)
            except (ValueError, KeyError, TypeError, JobFSMError) as err:
                return self._send(400, {"error": str(err)})
            return self._send(202, {"job": job.id, "state": job.state})

        def do_GET(self) -> None:
            if not self.path.startswith("/jobs/"):
                return self._send(404, {"error": "not found"})
            try:
                job = engine.get(self.path.removeprefix("/jobs/"))
            except JobNotFound as err:
                return self._send(404, {"error": str(err)})
            return self._send(200, {"id": job.id, "state": job.state, "result": job.result})

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
    tmp = tempfile.mkdtemp(prefix="jobfsm-example-")
    os.environ.setdefault(OUTBOX_ENV, os.path.join(tmp, "outbox.db"))
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
    print(f"listening on http://{host!s}:{port} (store in {tmp})", flush=True)
    code = 0
    if args.selftest:
        try:
            worker.wait_started(10)
            code = selftest(f"http://{host!s}:{port}")
        finally:
            stop()
    for t in threads:
        t.join()
    engine.store.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
