"""Handlers that report progress, for worker processes the progress tests start.

Each runs in `jobfsm worker --app tests.integration.worker.progress_app:handlers`
on the thread, process or asyncio executor; the asyncio executor runs the
`async def` ones on its loop and the sync ones on threads.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from fsm.errors import PayloadError
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()

#: seconds between two steps of the counting handlers
STEP = 0.05


def count(ctx: Context) -> dict[str, Any]:
    """Counts up to `payload["of"]`, reporting each step; after a cancel request it
    returns what it did so far (its partial output) instead of raising."""
    of = int(ctx.payload["of"])
    done = 0
    while done < of:
        if ctx.cancelled.is_set():
            return {"partial": True, "done": done}
        done += 1
        ctx.progress(done=done, of=of)
        time.sleep(STEP)
    return {"partial": False, "done": done}


def count_then_stop(ctx: Context) -> None:
    """Reports progress, then stops with `check_cancelled` after a cancel request
    (raises): the job keeps its latest progress as the partial result."""
    done = 0
    while True:
        ctx.check_cancelled()
        done += 1
        ctx.progress(done=done)
        time.sleep(STEP)


def count_then_hang(ctx: Context) -> str:
    """Attempt 1 reports `payload["steps"]` steps (with its pid), then sleeps without
    looking at its token: only a kill stops it. Later attempts report nothing and
    return after `payload["then"]` seconds."""
    if ctx.attempt > 1:
        time.sleep(float(ctx.payload.get("then", 0)))
        return "later attempt"
    for done in range(1, int(ctx.payload["steps"]) + 1):
        ctx.progress(done=done, pid=os.getpid())
        time.sleep(STEP)
    time.sleep(600)
    return "never"


def oversized(ctx: Context) -> dict[str, Any]:
    """Reports a small value, then one over the limit: the second raises in here."""
    ctx.progress(step="small")
    try:
        ctx.progress(blob="x" * (int(ctx.payload["bytes"])))
    except PayloadError as err:
        error = str(err)
    else:
        error = None
    time.sleep(float(ctx.payload.get("then", 0)))
    return {"error": error}


async def acount(ctx: Context) -> dict[str, Any]:
    """`count` as an `async def` handler: a cancel request cancels its task at its next
    await; it catches that and returns its partial output."""
    of = int(ctx.payload["of"])
    done = 0
    try:
        while done < of:
            done += 1
            ctx.progress(done=done, of=of)
            await asyncio.sleep(STEP)
    except asyncio.CancelledError:
        return {"partial": True, "done": done}
    return {"partial": False, "done": done}


handlers.register("count", count)
handlers.register("count_then_stop", count_then_stop)
handlers.register("count_then_hang", count_then_hang, retry_safe=True, max_attempts=3)
handlers.register("oversized", oversized)
handlers.register("acount", acount)
