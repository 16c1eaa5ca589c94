"""The handler of the crash suite's `jobfsm worker` processes.

`--app benchmarks.crash.jobfsm_app:handlers`.

It records its start, sleeps, optionally commits an outside effect fenced by
`ctx.fence` (docs/workers.md, "Fencing outside effects"), and records completion.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from benchmarks.crash import marks
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

QUEUE = "crash"
EFFECTS_DB = "effects.db"

handlers = Handlers()


def create_effects(folder: Path) -> None:
    with sqlite3.connect(folder / EFFECTS_DB) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS effects (job_id TEXT PRIMARY KEY, fence INTEGER NOT NULL)"
        )
    conn.close()


def fenced_effect(ctx: Context) -> bool:
    """Write the effect only under a fence above the last one written: a stale owner cannot."""
    conn = sqlite3.connect(Path(ctx.payload["marks"]) / EFFECTS_DB, timeout=30)
    try:
        with conn:
            written = conn.execute(
                "INSERT INTO effects VALUES (?, ?) ON CONFLICT (job_id) DO UPDATE "
                "SET fence = excluded.fence WHERE excluded.fence > effects.fence",
                (ctx.job.id, ctx.fence),
            ).rowcount
    finally:
        conn.close()
    return written == 1


@handlers.handler("crash_sleep", queue=QUEUE, retry_safe=True)
def crash_sleep(ctx: Context) -> dict[str, object]:
    folder = ctx.payload["marks"]
    marks.record(folder, "start", attempt=ctx.attempt, fence=ctx.fence)
    marks.nap(float(ctx.payload["seconds"]))
    committed = bool(ctx.payload.get("effect")) and fenced_effect(ctx)
    if committed:
        marks.record(folder, "effect", attempt=ctx.attempt, fence=ctx.fence)
    marks.record(folder, "done", attempt=ctx.attempt, fence=ctx.fence, committed=committed)
    return {"fence": ctx.fence, "committed": committed}
