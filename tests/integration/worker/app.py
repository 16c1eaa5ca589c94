"""Handlers the worker integration tests run, in worker processes and executor children.

Each handler leaves marker files in `payload["dir"]` ("<job>.<attempt>.<what>.<pid>")
so a test can see, from outside, which process ran which attempt and how far it got.
"""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from fsm.errors import Permanent
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()


def mark(ctx: Context, what: str) -> None:
    folder = ctx.payload.get("dir") if isinstance(ctx.payload, dict) else None
    if folder:
        name = f"{ctx.job.id}.{ctx.attempt}.{what}.{os.getpid()}"
        (Path(folder) / name).touch()


def _nap(ctx: Context, seconds: float, *, cooperative: bool = True) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if cooperative:
            ctx.check_cancelled()
        time.sleep(0.02)


def noop(ctx: Context) -> None:
    return None


def sleep(ctx: Context) -> dict[str, Any]:
    """Sleeps `first` seconds on attempt 1 and `then` seconds afterwards."""
    mark(ctx, "started")
    p = ctx.payload
    _nap(ctx, float(p.get("first", 0)) if ctx.attempt == 1 else float(p.get("then", 0)))
    mark(ctx, "done")
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def stubborn(ctx: Context) -> None:
    """Ignores its cancel token: only a kill stops it."""
    mark(ctx, "started")
    _nap(ctx, float(ctx.payload.get("seconds", 60)), cooperative=False)


def fenced_effect(ctx: Context) -> dict[str, Any]:
    """Writes an outside effect guarded by the fence: a stale fence cannot commit."""
    p = ctx.payload
    mark(ctx, "started")
    if ctx.attempt == 1:
        time.sleep(float(p.get("first", 0)))
    conn = sqlite3.connect(p["effects_db"], timeout=30)
    try:
        with conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS effects (job_id TEXT PRIMARY KEY, "
                "fence INTEGER NOT NULL, commits INTEGER NOT NULL, pid INTEGER NOT NULL)"
            )
            written = conn.execute(
                "INSERT INTO effects VALUES (?, ?, 1, ?) ON CONFLICT (job_id) DO UPDATE "
                "SET fence = excluded.fence, commits = effects.commits + 1, pid = excluded.pid "
                "WHERE excluded.fence > effects.fence",
                (ctx.job.id, ctx.fence, os.getpid()),
            ).rowcount
    finally:
        conn.close()
    mark(ctx, f"effect{written}")
    return {"written": written, "fence": ctx.fence}


def segfault(ctx: Context) -> None:
    mark(ctx, "started")
    os.kill(os.getpid(), signal.SIGSEGV)


def hard_exit(ctx: Context) -> None:
    os._exit(3)


def collector(ctx: Context) -> dict[str, Any]:
    """The garbage collector's settings in the process that runs the handler."""
    return {"threshold": list(gc.get_threshold()), "frozen": gc.get_freeze_count()}


def refuse(ctx: Context) -> None:
    """Fails for good (a prerequisite that fails, for the dependency tests)."""
    mark(ctx, "started")
    raise Permanent("refused on purpose")


handlers.register("noop", noop)
handlers.register("collector", collector)
handlers.register("refuse", refuse)
handlers.register("sleep", sleep, retry_safe=True)
handlers.register("sleep_unsafe", sleep, retry_safe=False)
handlers.register("stubborn", stubborn)
handlers.register("effect", fenced_effect, retry_safe=True)
handlers.register("segfault", segfault, max_attempts=2)
handlers.register("exit", hard_exit, max_attempts=1)
# A payment: never run twice. Its policy lives here only; submitters may not know it.
handlers.register("pay", sleep, retry_safe=False, max_attempts=1)
