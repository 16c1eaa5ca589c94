"""An application's handlers, runnable by the stock worker:

    jobfsm worker --app examples.app:worker --store sqlite:///jobs.db --queues default

`send_welcome` writes to an outbox table guarded by the job's fence, so a stale
run (one whose lease was taken over) can never overwrite a newer one, and a rerun
after a crash finds the message already there instead of sending it twice.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from fsm import Permanent
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

#: where the outbox lives (a real service would use its own database)
OUTBOX_ENV = "EXAMPLE_OUTBOX"

worker = Handlers()
#: the same registry under a second name, for readers who prefer it
handlers = worker


def _outbox() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ.get(OUTBOX_ENV, "outbox.db"), timeout=10.0)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS outbox ("
        " job_id TEXT PRIMARY KEY, fence INTEGER NOT NULL, recipient TEXT NOT NULL,"
        " body TEXT NOT NULL, written_at REAL NOT NULL)"
    )
    return conn


def fenced_write(job_id: str, fence: int, recipient: str, body: str) -> bool:
    """Write the message once per job; a lower fence than the stored one changes nothing."""
    with _outbox() as conn:
        cur = conn.execute(
            "INSERT INTO outbox (job_id, fence, recipient, body, written_at)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (job_id) DO UPDATE SET fence = excluded.fence"
            " WHERE excluded.fence > outbox.fence",
            (job_id, fence, recipient, body, time.time()),
        )
        return cur.rowcount == 1


@worker.handler("email.welcome", retry_safe=False, timeout=30, max_attempts=5)
def send_welcome(ctx: Context) -> dict[str, Any]:
    """Not retry-safe: a run lost to a crash goes to investigate, never silently twice."""
    to = ctx.payload.get("email")
    if not isinstance(to, str) or "@" not in to:
        raise Permanent(f"not an email address: {to!r}")
    ctx.check_cancelled()
    written = fenced_write(ctx.job.id, ctx.fence, to, f"Welcome aboard, {to}!")
    return {"to": to, "written": written, "fence": ctx.fence}


@worker.handler("report.build", timeout=60, max_attempts=3)
def build_report(ctx: Context) -> dict[str, Any]:
    """Retry-safe and cancellable: it checks for a cancel request between steps."""
    rows = int(ctx.payload.get("rows", 100))
    total = 0
    for i in range(rows):
        if i % 10 == 0:
            ctx.check_cancelled()
            ctx.progress(done=i, of=rows)
        total += i
    return {"rows": rows, "total": total}
