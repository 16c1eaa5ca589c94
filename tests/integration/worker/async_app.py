"""`async def` handlers (and one sync one) for worker processes started by the tests.

Like `app.py`, each leaves marker files in `payload["dir"]`
("<job>.<attempt>.<what>.<pid>") so a test sees from outside how far it got.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from fsm.errors import Ambiguous, BadInput, Permanent, Retry
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

from .app import fenced_effect, mark

handlers = Handlers()


async def nap(ctx: Context) -> dict[str, Any]:
    """Awaits `first` seconds on attempt 1 and `then` seconds afterwards."""
    mark(ctx, "started")
    p = ctx.payload
    seconds = float(p.get("first", 0)) if ctx.attempt == 1 else float(p.get("then", 0))
    ctx.progress(step="waiting", seconds=seconds)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        mark(ctx, "cancelled")  # the task is cancelled: clean up, then let it through
        raise
    mark(ctx, "done")
    return {"pid": os.getpid(), "attempt": ctx.attempt, "echo": p.get("echo")}


async def outcome(ctx: Context) -> str:
    """Ends as `payload["how"]` says: retry, permanent, ambiguous, crash, or returns."""
    await asyncio.sleep(0)
    how = ctx.payload["how"]
    if how == "retry":
        raise Retry(after=0.1)
    if how == "permanent":
        raise Permanent("no such account")
    if how == "ambiguous":
        raise Ambiguous("the bank did not answer")
    if how == "crash":
        raise RuntimeError("boom")
    ctx.progress(done=1)
    return "fine"


async def deaf(ctx: Context) -> None:
    """Swallows every cancellation: only abandonment stops the worker waiting for it."""
    mark(ctx, "started")
    until = time.monotonic() + float(ctx.payload.get("seconds", 60))
    while time.monotonic() < until:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            mark(ctx, "ignored")


async def blocker(ctx: Context) -> dict[str, Any]:
    """Blocks the event loop (a sync sleep, no await) for `seconds`: a handler's bug."""
    mark(ctx, "started")
    time.sleep(float(ctx.payload["seconds"]))
    mark(ctx, "done")
    return {"fence": ctx.fence}


async def effect(ctx: Context) -> dict[str, Any]:
    """The fenced outside effect of app.py, written after awaiting `wait` seconds."""
    await asyncio.sleep(float(ctx.payload.get("wait", 0)) if ctx.attempt == 1 else 0)
    result: dict[str, Any] = await asyncio.to_thread(fenced_effect, ctx)
    return result


def sync_echo(ctx: Context) -> Any:
    return {"sync": ctx.payload}


async def marked(ctx: Context) -> dict[str, Any]:
    """Marks `n` times (each stored before the next line runs); past the bound the
    mark raises BadInput in the handler, which returns it."""
    refused = None
    for i in range(int(ctx.payload["n"])):
        try:
            if i % 2:  # both forms: the blocking one and the one that yields the loop
                await ctx.amark(f"outside call {i}", external_id=f"ext-{i}")
            else:
                ctx.mark(f"outside call {i}", external_id=f"ext-{i}")
        except BadInput as err:
            refused = str(err)
            break
    return {"refused": refused}


handlers.register("marked", marked, retry_safe=False, marks_outside_calls=True)
handlers.register("nap", nap, retry_safe=True)
handlers.register("nap_unsafe", nap, retry_safe=False)
handlers.register("nap_short", nap, timeout=0.5, max_attempts=1)
handlers.register("outcome", outcome, max_attempts=2)
handlers.register("deaf", deaf, timeout=0.5, max_attempts=1)
handlers.register("blocker", blocker)
handlers.register("effect", effect, retry_safe=True)
handlers.register("sync_echo", sync_echo)
