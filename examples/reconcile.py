"""Reconcile before investigate: a payment whose worker dies, recovered without a person.

    python -m examples.reconcile [--workdir DIR]

The handler of "payment.charge" is not retry-safe: charging twice is the bug to avoid.
It marks (`ctx.mark`) before it calls the payment provider, with the external id it
gives the provider, and the kind declares a reconciler that asks the provider what
happened to a lost run. The provider is a table in a SQLite file of its own.

Two payments, one after the other; each handler SIGKILLs its own worker on its
first attempt, and the next worker's start-up sweep finds the dead owner (pid gone):

- "before": killed before it marked: worker 2 re-runs it at once (nothing reached
  the provider);
- "after": killed after it charged (on worker 2): worker 3's sweep claims the lost
  run for the reconciler, which finds the charge by its external id: the job
  succeeds with the provider's answer, and is never run again.

Each ends with exactly one charge; the audit trails (with their reason codes) are
printed. Exit status 0 when both payments succeeded, each charged once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fsm import Engine, open_store
from fsm.service.reconcile import LostRun, done, not_started
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

ROOT = Path(__file__).resolve().parents[1]
#: longest the example waits for a worker to start or a payment to finish (seconds)
WAIT = 60.0

handlers = Handlers()


def _provider(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "external_id TEXT UNIQUE NOT NULL, amount INTEGER NOT NULL, fence INTEGER NOT NULL)"
    )
    return conn


def charge(ctx: Context) -> dict[str, Any]:
    p = ctx.payload
    crash = p.get("crash") if ctx.attempt == 1 else None
    if crash == "before":
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before any outside call
    external_id = f"pay-{ctx.job.id}"
    ctx.mark("charging the card", external_id=external_id)  # stored before the call
    conn = _provider(p["provider"])
    try:
        with conn:
            row = conn.execute(
                "INSERT INTO charges (external_id, amount, fence) VALUES (?, ?, ?)",
                (external_id, p["amount"], ctx.fence),
            )
    finally:
        conn.close()
    if crash == "after":
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies after the card was charged
    return {"charge": row.lastrowid}


def ask_provider(run: LostRun) -> Any:
    """Ask the provider about the lost run's external id: charged, or never reached."""
    ids = [m.external_id for m in run.marks if m.external_id]
    if not ids:
        return not_started()
    conn = _provider(run.job.payload["provider"])
    try:
        row = conn.execute("SELECT id FROM charges WHERE external_id = ?", (ids[-1],)).fetchone()
    finally:
        conn.close()
    return not_started() if row is None else done({"charge": row[0], "reconciled": True})


handlers.register(
    "payment.charge",
    charge,
    retry_safe=False,
    marks_outside_calls=True,
    reconcile=ask_provider,
    reconcile_timeout=5.0,
)


def _worker(store: str, log: Path) -> subprocess.Popen[bytes]:
    ready = log.with_suffix(".ready")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "fsm.cli",
                    "worker",
                    "--app",
                    "examples.reconcile:handlers",
                ),
                *("--store", store, "--poll-interval", "0.1", "--sweep-interval", "0.5"),
                *("--log-level", "WARNING", "--ready-file", str(ready)),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    until = time.monotonic() + WAIT
    while not ready.exists() and proc.poll() is None and time.monotonic() < until:
        time.sleep(0.05)
    return proc


def _wait(engine: Engine, job_id: str, states: set[str]) -> str:
    until = time.monotonic() + WAIT
    while time.monotonic() < until:
        state = engine.get(job_id).state
        if state in states:
            return state
        time.sleep(0.1)
    return engine.get(job_id).state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where the files go")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="jobfsm-reconcile-"))
    work.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{work / 'jobs.db'}"
    provider = str(work / "provider.db")
    engine = Engine(open_store(store), kinds={k: spec.policy for k, spec in handlers.items()})
    workers: list[subprocess.Popen[bytes]] = []
    try:
        jobs: dict[str, str] = {}
        payload = {"amount": 1200, "provider": provider}
        jobs["before"] = engine.submit("payment.charge", {**payload, "crash": "before"}).id
        first = _worker(store, work / "worker-1.log")
        workers.append(first)
        first.wait(timeout=WAIT)  # its handler kills it before the charge
        print(f"worker 1 died (exit {first.returncode}) before charging; starting worker 2")
        second = _worker(store, work / "worker-2.log")
        workers.append(second)
        _wait(engine, jobs["before"], set(engine.final_states))  # re-run by worker 2
        jobs["after"] = engine.submit("payment.charge", {**payload, "crash": "after"}).id
        second.wait(timeout=WAIT)  # its handler kills it after the charge
        print(f"worker 2 died (exit {second.returncode}) after charging; starting worker 3")
        workers.append(_worker(store, work / "worker-3.log"))
        ok = True
        for crash, job_id in jobs.items():
            state = _wait(engine, job_id, set(engine.final_states))
            conn = _provider(provider)
            try:
                charged = conn.execute(
                    "SELECT COUNT(*) FROM charges WHERE external_id = ?", (f"pay-{job_id}",)
                ).fetchone()[0]
            finally:
                conn.close()
            print(f"\npayment killed {crash} the charge: {state}, charged {charged} time(s)")
            for e in engine.history(job_id):
                mark = e.data.get("external_id") if e.event == "mark" else ""
                move = f"{e.from_state or '-':>11} -> {e.to_state:<11}"
                print(f"  {e.event:<10} {move} {e.code} {mark or ''}")
            ok = ok and state == "succeeded" and charged == 1
        print("\nok: each payment charged exactly once" if ok else "\nFAILED")
        return 0 if ok else 1
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=WAIT)
        engine.store.close()


if __name__ == "__main__":
    sys.exit(main())
