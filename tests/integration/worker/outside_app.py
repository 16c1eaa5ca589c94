"""Handlers that call a fake outside service, and their reconcilers (worker processes).

The "provider" is a table in a SQLite file of its own (`payload["provider_db"]`), apart
from the job store: every charge is one row, so a charge made twice is two rows. The
handler marks before it charges (`ctx.mark`, with the charge's external id), then
charges, then returns. Marker files in `payload["dir"]` ("<job>.<attempt>.<what>.<pid>")
show from outside how far each attempt got, so a test can SIGKILL its worker at a
chosen point. The reconcilers ask the provider (truthfully) or answer a fixed outcome.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from fsm.service.reconcile import LostRun, done, not_started, still_running, unknown
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()


def note(ctx: Context, what: str) -> None:
    name = f"{ctx.job.id}.{ctx.attempt}.{what}.{os.getpid()}"
    (Path(ctx.payload["dir"]) / name).touch()


def _provider(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "external_id TEXT NOT NULL, job_id TEXT NOT NULL, fence INTEGER NOT NULL, "
        "pid INTEGER NOT NULL)"
    )
    return conn


def charges(path: str, job_id: str) -> list[tuple[int, str, int]]:
    """(id, external id, fence) of every charge the provider holds for the job."""
    conn = _provider(path)
    try:
        return list(
            conn.execute(
                "SELECT id, external_id, fence FROM charges WHERE job_id = ? ORDER BY id",
                (job_id,),
            )
        )
    finally:
        conn.close()


def _nap(ctx: Context, key: str) -> None:
    """The first attempt waits `payload[key]` seconds (a window to be killed in)."""
    if ctx.attempt == 1:
        time.sleep(max(0.0, float(ctx.payload.get(key, 0))))


def charge(ctx: Context) -> dict[str, Any]:
    """Wait `before` s, mark, wait `between` s, charge, wait `after` s (those on the first
    attempt only), return the charge."""
    p = ctx.payload
    note(ctx, "started")
    _nap(ctx, "before")
    external_id = f"charge-{ctx.job.id}"
    ctx.mark("calling the payment provider", external_id=external_id)
    note(ctx, "marked")
    _nap(ctx, "between")
    conn = _provider(p["provider_db"])
    try:
        with conn:
            row = conn.execute(
                "INSERT INTO charges (external_id, job_id, fence, pid) VALUES (?, ?, ?, ?)",
                (external_id, ctx.job.id, ctx.fence, os.getpid()),
            )
            charge_id = row.lastrowid
    finally:
        conn.close()
    note(ctx, "charged")
    _nap(ctx, "after")
    return {"charge": charge_id}


def mark_probe(ctx: Context) -> dict[str, Any]:
    """Marks once and says what `ctx.mark` did: returned, or raised what."""
    try:
        ctx.mark("probe", external_id=ctx.payload.get("external_id"))
    except Exception as err:
        return {"raised": type(err).__name__, "message": str(err)}
    return {"raised": None}


def ask_provider(run: LostRun) -> Any:
    """A truthful reconciler: the provider knows the charge by its external id."""
    ids = [m.external_id for m in run.marks if m.external_id]
    if not ids:
        return not_started()
    conn = _provider(run.job.payload["provider_db"])
    try:
        row = conn.execute("SELECT id FROM charges WHERE external_id = ?", (ids[-1],)).fetchone()
    finally:
        conn.close()
    return not_started() if row is None else done({"charge": row[0], "reconciled": True})


def ask_slowly(run: LostRun) -> Any:
    """Says `still_running` the first time it is asked about a run, then the truth."""
    seen = Path(run.job.payload["dir"]) / f"{run.job.id}.asked"
    if not seen.exists():
        seen.touch()
        return still_running(until=time.time() + 1.0)
    return ask_provider(run)


def cannot_tell(run: LostRun) -> Any:
    return unknown("the provider's status page is down")


def raises(run: LostRun) -> Any:
    raise ConnectionError("provider unreachable")


def hangs(run: LostRun) -> Any:
    time.sleep(30)
    return done()


def asks_slowly(run: LostRun) -> Any:
    """Leaves a marker file, then takes 30 s: a window to kill the asking worker in."""
    (Path(run.job.payload["dir"]) / f"{run.job.id}.asking.{os.getpid()}").touch()
    time.sleep(30)
    return done()


def garbage(run: LostRun) -> Any:
    return {"status": "paid"}


_CHARGE = {"retry_safe": False, "marks_outside_calls": True, "max_attempts": 5}
handlers.register("charge", charge, reconcile=ask_provider, **_CHARGE)
handlers.register("charge_slow", charge, reconcile=ask_slowly, **_CHARGE)
handlers.register("charge_unknown", charge, reconcile=cannot_tell, **_CHARGE)
handlers.register("charge_raises", charge, reconcile=raises, **_CHARGE)
handlers.register("charge_hangs", charge, reconcile=hangs, reconcile_timeout=1.0, **_CHARGE)
handlers.register("charge_garbage", charge, reconcile=garbage, **_CHARGE)
handlers.register("charge_asking", charge, reconcile=asks_slowly, reconcile_timeout=25.0, **_CHARGE)
# no reconciler: a lost run after its mark goes to investigate, before it is re-run
handlers.register("charge_plain", charge, **_CHARGE)
