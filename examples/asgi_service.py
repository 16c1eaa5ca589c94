"""An asyncio web service (Starlette) that submits jobs, awaits their results, and runs
an async worker in the same process.

    pip install -e '.[web]'           # starlette and uvicorn (the `web` extra; `dev` has it)
    JOBFSM_STORE=sqlite:///asgi.db uvicorn examples.asgi_service:app --port 8000
    curl -X POST localhost:8000/quotes -d '{"symbol": "ACME"}'
    curl localhost:8000/jobs/<id>

POST /quotes submits a `quote.fetch` job whose idempotency key is derived from the
request (the client's `Idempotency-Key` header, else a hash of the body) and from who
sent it (`_client`), so a client retrying its request gets the same job, never a second
one, and no client can reach another's job by sending its key. It then awaits the job's
outcome for at most WAIT seconds: 200 with the result, 502 if it failed, 409 if it
was parked for an operator, or 202 with the job's address while it still runs.

What a client sends is bounded before it costs anything: a Content-Length that is not
a decimal count is a 400, one over MAX_BODY a 413 before the body is read, and the body
is read in chunks that stop at MAX_BODY (a chunked upload with no length included);
JSON nested too deep for the parser is a 400; the `latency` a client asks for is at
most MAX_LATENCY seconds, so no client holds a worker slot longer.

The worker runs on a thread of this process (`Worker.run` blocks), with its own event
loop for the `async def` handler (the asyncio executor), so handlers never share the
web server's loop. Nothing the web handlers do blocks the loop: they go through
`AsyncEngine`. Stopping the server (SIGTERM, Ctrl-C) drains the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fsm import AsyncEngine, Engine, JobFSMError, JobNotFound, WaitTimeout
from fsm.records import Job
from fsm.registry import open_store
from fsm.worker import Worker
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

#: seconds a request waits for its job's outcome before answering 202
WAIT = float(os.environ.get("ASGI_WAIT", "5"))
#: largest request body read
MAX_BODY = 16 * 1024
#: longest simulated price-service call a client may ask for (seconds): a worker slot
#: is held no longer than this by any request
MAX_LATENCY = 5.0
#: a Content-Length header: ASCII digits only (`int()` would take "²", " 5" or "+5")
_LENGTH = re.compile(r"[0-9]{1,20}")
#: jobs the in-process worker runs at once (tasks on its event loop)
CONCURRENCY = int(os.environ.get("ASGI_CONCURRENCY", "100"))

handlers = Handlers()


@handlers.handler("quote.fetch", retry_safe=True, timeout=30, max_attempts=3)
async def fetch_quote(ctx: Context) -> dict[str, Any]:
    """Stands in for an HTTP call to a price service (an `await`, never a blocking call)."""
    p = ctx.payload
    await asyncio.sleep(min(float(p.get("latency", 0.05)), MAX_LATENCY))
    price = int(hashlib.sha256(p["symbol"].encode()).hexdigest()[:6], 16) % 10_000 / 100
    return {"symbol": p["symbol"], "price": price, "attempt": ctx.attempt}


def _client(request: Request) -> str:
    """Who sent the request: the authenticated user when an authentication middleware
    set one (put yours here), else the peer's address."""
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        return "user:" + str(user.display_name)
    return "peer:" + (request.client.host if request.client else "")


def _key(request: Request, body: bytes) -> str:
    """The job's idempotency key, from the client and the request (its `Idempotency-Key`
    header, else its body): keys are [A-Za-z0-9_.:-], and one client's key never names
    another client's job."""
    given = request.headers.get("idempotency-key", "")
    source = given.encode() if given else body
    digest = hashlib.sha256(_client(request).encode() + b"\0" + source)
    return "quote:" + digest.hexdigest()[:40]


class BadRequest(Exception):
    """A request refused before a job is submitted: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _body(request: Request) -> bytes:
    """The request's body, at most MAX_BODY bytes: a declared length is checked before
    anything is read, and the stream is read in chunks that stop past the limit."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not _LENGTH.fullmatch(declared):
            raise BadRequest(400, "Content-Length must be a decimal count of bytes")
        if int(declared) > MAX_BODY:
            raise BadRequest(413, f"body over {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(413, f"body over {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _payload(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except RecursionError:  # nested deeper than the parser goes
        raise BadRequest(400, "JSON nested too deep") from None
    except ValueError as err:
        raise BadRequest(400, f"not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("symbol"), str):
        raise BadRequest(400, 'expected {"symbol": "...", "latency": seconds}')
    try:
        latency = float(data.get("latency", 0.05))
    except (TypeError, ValueError):
        raise BadRequest(400, "latency must be a number of seconds") from None
    if not (math.isfinite(latency) and 0 <= latency <= MAX_LATENCY):
        raise BadRequest(400, f"latency must be between 0 and {MAX_LATENCY:g} seconds")
    return {"symbol": data["symbol"], "latency": latency}


def _view(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "state": job.state,
        "result": job.result,
        "error": job.last_error,
        "attempt": job.attempt,
    }


async def post_quote(request: Request) -> JSONResponse:
    aengine: AsyncEngine = request.app.state.aengine
    try:
        body = await _body(request)
        payload = _payload(body)
    except BadRequest as err:
        return JSONResponse({"error": str(err)}, status_code=err.status)
    try:
        job = await aengine.submit("quote.fetch", payload, idempotency_key=_key(request, body))
    except JobFSMError as err:
        return JSONResponse({"error": str(err)}, status_code=400)
    try:
        done = await aengine.wait(job.id, timeout=WAIT)
    except WaitTimeout:
        still = await aengine.get(job.id)
        return JSONResponse(_view(still), status_code=202, headers={"Location": f"/jobs/{job.id}"})
    status = {"succeeded": 200, "investigate": 409}.get(done.state, 502)
    return JSONResponse(_view(done), status_code=status)


async def get_job(request: Request) -> JSONResponse:
    aengine: AsyncEngine = request.app.state.aengine
    try:
        job = await aengine.get(request.path_params["job_id"])
    except JobNotFound as err:
        return JSONResponse({"error": str(err)}, status_code=404)
    return JSONResponse(_view(job))


async def healthz(request: Request) -> JSONResponse:
    worker: Worker = request.app.state.worker
    return JSONResponse({"ready": worker.ready}, status_code=200 if worker.ready else 503)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    store = open_store()  # $JOBFSM_STORE, else sqlite:///jobfsm.db
    engine = Engine(store)
    worker = Worker(engine, handlers, concurrency=CONCURRENCY, install_signals=False)
    thread = threading.Thread(target=worker.run, name="jobfsm-worker", daemon=True)
    thread.start()
    await asyncio.to_thread(worker.wait_started, 30.0)
    app.state.worker = worker
    app.state.aengine = AsyncEngine(engine)
    try:
        yield
    finally:
        worker.stop()  # drain: jobs in flight finish within the shutdown grace
        await asyncio.to_thread(thread.join, engine.policy.limits.shutdown_grace + 10)
        await app.state.aengine.aclose()
        store.close()


app = Starlette(
    routes=[
        Route("/quotes", post_quote, methods=["POST"]),
        Route("/jobs/{job_id}", get_job),
        Route("/healthz", healthz),
    ],
    lifespan=lifespan,
)
