"""Batched raw baselines: what a worker's claim batches cost with no engine at all.

The same work as one jobfsm worker draining a queue, written as plain SQL on
jobfsm's own tables (the store's migrations create them, so every index a write
must update is there): per job the three transitions lease, start and succeed,
each a compare-and-set on `version` with one audit row in `job_events`, and
batched as the worker batches them:

- one client thread inserts the jobs in batches of `SUBMIT_BATCH` (job row +
  `submit` audit row each, one transaction per batch), as `submit_many` does;
- at the same time one drainer, on its own connection, repeats: claim up to
  `claim` due jobs in one transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL;
  `BEGIN IMMEDIATE`, the single writer, on SQLite), start them in a second, and
  complete them in a third. An empty claim waits `IDLE_WAIT` before the next.

The clock runs from the first insert until the drainer completed every job.
Durability is the store's: PostgreSQL with the server's `synchronous_commit`
(on by default), SQLite in WAL with `synchronous=FULL`, like jobfsm's defaults.
No decide, no JSON of records, no executor, no handler call: the gap to jobfsm's
worker is what the engine costs per job. A worker's largest claim is its free slots,
so the claim size is the threads per process of the jobfsm row compared with
(`BASELINES`, called by `benchmarks/throughput.py` with its best shape's threads).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import Config, Measurement, version_of
from benchmarks.rows import audit_values, inserts, job_values, owner_text
from benchmarks.services import fresh_database, pg_server_settings
from fsm import Job, Owner, open_store
from fsm.records import AuditEntry, new_id

SUBMIT_BATCH = 1_000  # jobs per insert transaction, as submit_many in the throughput suite
CLAIM = 32  # default claim size; the throughput suite passes its worker's threads per process
IDLE_WAIT = 0.001  # seconds the drainer waits after an empty claim
LIMIT_S = 900.0  # a run that takes longer fails

LEASE = ("queued", "leased")
STARTED = "attempt = attempt + 1, started_at = {at}"
FINISHED = "owner = NULL, lease_until = NULL, result_json = 'null', finished_at = {at}"


def _job_rows(n: int, queue: str) -> tuple[list[list[Any]], list[list[Any]]]:
    now = time.time()
    jobs, audits = [], []
    for _ in range(n):
        job = Job(new_id(now), "noop", queue, "null", "queued", now, now, now, retry_safe=True)
        jobs.append(job_values(job))
        audits.append(_audit((job.id, 0, 1, 0), "submit", (None, "queued"), now))
    return jobs, audits


Got = tuple[str, int, int, int]  # a claimed job: id, fence, version, attempt


def _audit(job: Got, event: str, move: tuple[str | None, str], at: float) -> list[Any]:
    """The audit row of `job` (as it is after the change) moving `move` by `event`."""
    job_id, fence, version, attempt = job
    entry = AuditEntry(job_id, version, at, event, move[0], move[1], fence, attempt)
    return audit_values(entry)


class _Run:
    """One baseline run: an inserter thread beside a drainer, timed together."""

    def __init__(self, jobs: int, insert: Callable[[int], None]) -> None:
        self.jobs = jobs
        self.insert = insert
        self.errors: list[BaseException] = []

    def _inserter(self) -> None:
        try:
            for start in range(0, self.jobs, SUBMIT_BATCH):
                self.insert(min(SUBMIT_BATCH, self.jobs - start))
        except BaseException as err:  # reported by drain()
            self.errors.append(err)

    def drain(self, batch: Callable[[], int]) -> float:
        thread = threading.Thread(target=self._inserter, name="raw-inserter")
        started = time.perf_counter()
        thread.start()
        done = 0
        try:
            while done < self.jobs:
                if self.errors:
                    raise RuntimeError("benchmark: raw inserter failed") from self.errors[0]
                if time.perf_counter() - started > LIMIT_S:
                    raise TimeoutError(f"benchmark: raw drain took over {LIMIT_S:g} s")
                got = batch()
                done += got
                if got == 0:
                    time.sleep(IDLE_WAIT)
            return self.jobs / (time.perf_counter() - started)
        finally:
            thread.join()


# --- SQLite ------------------------------------------------------------------------------


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _sqlite_tx(conn: sqlite3.Connection, fn: Callable[[], Any]) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        value = fn()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return value


def sqlite_batched(path: Path, jobs: int, claim: int = CLAIM) -> float:
    """Jobs/s through lease, start, succeed in batches of `claim` on one SQLite file."""
    open_store(f"sqlite:///{path}").close()  # jobfsm's schema, migrated
    writer, worker = _sqlite_connect(path), _sqlite_connect(path)
    add_job, add_audit = inserts("?")
    owner = owner_text(Owner("raw", os.getpid(), "raw-batched"))

    def insert(n: int) -> None:
        rows, audits = _job_rows(n, "default")

        def write() -> None:
            writer.executemany(add_job, rows)
            writer.executemany(add_audit, audits)

        _sqlite_tx(writer, write)

    def step(got: Sequence[Got], event: str, frm: str, to: str,
             sets: str) -> None:  # fmt: skip
        now = time.time()
        done = worker.executemany(
            f"UPDATE jobs SET state = ?, version = ?, updated_at = ?, {sets.format(at='?')} "
            "WHERE id = ? AND version = ?",
            [(to, v + 1, now, now, i, v) for i, _f, v, _a in got],
        )
        assert done.rowcount == len(got)
        worker.executemany(add_audit, [_audit((i, f, v + 1, a), event, (frm, to), now)
                                       for i, f, v, a in got])  # fmt: skip

    def lease() -> list[Got]:
        now = time.time()
        found = worker.execute(
            "SELECT id, fence, version, attempt FROM jobs WHERE state IN ('queued','retry_wait') "
            "AND queue = 'default' AND run_after <= ? ORDER BY priority, run_after, id LIMIT ?",
            (now, claim),
        ).fetchall()
        worker.executemany(
            "UPDATE jobs SET state = 'leased', fence = ?, owner = ?, lease_until = ?, "
            "version = ?, updated_at = ? WHERE id = ? AND version = ?",
            [(f + 1, owner, now + 30, v + 1, now, i, v) for i, f, v, _a in found],
        )
        worker.executemany(add_audit, [_audit((i, f + 1, v + 1, a), "lease", LEASE, now)
                                       for i, f, v, a in found])  # fmt: skip
        return [(i, f + 1, v + 1, a) for i, f, v, a in found]

    def batch() -> int:
        got = _sqlite_tx(worker, lease)
        if got:
            _sqlite_tx(worker, lambda: step(got, "start", "leased", "running", STARTED))
            got = [(i, f, v + 1, a + 1) for i, f, v, a in got]
            _sqlite_tx(worker, lambda: step(got, "succeed", "running", "succeeded", FINISHED))
        return len(got)

    try:
        return _Run(jobs, insert).drain(batch)
    finally:
        writer.close()
        worker.close()


# --- PostgreSQL --------------------------------------------------------------------------

PG_LEASE = """
WITH due AS (
    SELECT id FROM jobs WHERE state IN ('queued', 'retry_wait') AND queue = 'default'
    AND run_after <= %(now)s ORDER BY priority, run_after, id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j SET state = 'leased', fence = j.fence + 1, owner = %(owner)s,
    lease_until = %(until)s, version = j.version + 1, updated_at = %(now)s
FROM due WHERE j.id = due.id
RETURNING j.id, j.fence, j.version, j.attempt
"""

PG_STEP = """
UPDATE jobs AS j SET state = %(to)s, version = j.version + 1, updated_at = %(now)s, {sets}
FROM (SELECT unnest(%(ids)s::text[]) AS id, unnest(%(versions)s::bigint[]) AS version) AS x
WHERE j.id = x.id AND j.version = x.version
"""


def postgres_batched(jobs: int, claim: int = CLAIM) -> float:
    """Jobs/s through lease, start, succeed in batches of `claim` on a fresh database."""
    import psycopg

    with fresh_database() as url:
        open_store(url).close()  # jobfsm's schema, migrated
        writer = psycopg.connect(url)
        worker = psycopg.connect(url)
        add_job, add_audit = inserts("%s")
        owner = owner_text(Owner("raw", os.getpid(), "raw-batched"))

        def insert(n: int) -> None:
            rows, audits = _job_rows(n, "default")
            with writer.cursor() as cur:
                cur.executemany(add_job, rows)
                cur.executemany(add_audit, audits)
            writer.commit()

        def step(got: list[Got], event: str, frm: str, to: str,
                 sets: str) -> None:  # fmt: skip
            now = time.time()
            with worker.cursor() as cur:
                cur.execute(
                    PG_STEP.format(sets=sets.format(at="%(now)s")),
                    {"to": to, "now": now, "ids": [g[0] for g in got],
                     "versions": [g[2] for g in got]},
                )  # fmt: skip
                assert cur.rowcount == len(got)
                cur.executemany(add_audit, [_audit((i, f, v + 1, a), event, (frm, to), now)
                                            for i, f, v, a in got])  # fmt: skip
            worker.commit()

        def batch() -> int:
            now = time.time()
            args = {"now": now, "limit": claim, "owner": owner, "until": now + 30}
            with worker.cursor() as cur:
                got: list[Got] = cur.execute(PG_LEASE, args).fetchall()
                cur.executemany(add_audit, [_audit(g, "lease", LEASE, now) for g in got])
            worker.commit()
            if got:
                step(got, "start", "leased", "running", STARTED)
                got = [(i, f, v + 1, a + 1) for i, f, v, a in got]
                step(got, "succeed", "running", "succeeded", FINISHED)
            return len(got)

        try:
            return _Run(jobs, insert).drain(batch)
        finally:
            writer.close()
            worker.close()


# --- the rows ----------------------------------------------------------------------------

NOTE = "No engine: one worker's claim batches written by hand; the ratio's denominator."


def _transactions(claim: int) -> str:
    return (
        f"3 per claim batch of up to {claim} jobs: lease (claim), start, succeed; each a "
        "compare-and-set on version with one audit row per job; inserts in batches of "
        f"{SUBMIT_BATCH} from a second connection at the same time"
    )


def sqlite_rows(cfg: Config, claim: int, why: str) -> list[Measurement]:
    """`cfg.repeats` runs on SQLite in claims of `claim` jobs; `why` says whose size it is."""
    values = [
        sqlite_batched(cfg.tmp / f"raw-batched-{uuid.uuid4().hex[:8]}.db", cfg.jobs, claim)
        for _ in range(cfg.repeats)
    ]
    settings = {
        "sqlite": sqlite3.sqlite_version,
        "driver": "python sqlite3",
        "tables": "jobfsm's own (its migrations), every index",
        "journal_mode": "WAL",
        "synchronous": "FULL",
        "claim size": why,
        "transactions": _transactions(claim),
        "claim": "BEGIN IMMEDIATE (the single writer); SELECT the due batch; UPDATE each",
    }
    label = f"raw sqlite3, batched like a worker (claims of {claim})"
    return [Measurement("throughput.raw.sqlite.batched.process", label, "jobs/s", values,
                        settings, note=NOTE)]  # fmt: skip


def postgres_rows(cfg: Config, claim: int, why: str) -> list[Measurement]:
    """`cfg.repeats` runs on PostgreSQL in claims of `claim` jobs; `why` says whose size it is."""
    values = [postgres_batched(cfg.jobs, claim) for _ in range(cfg.repeats)]
    settings = {
        "psycopg": version_of("psycopg"),
        **pg_server_settings(),
        "tables": "jobfsm's own (its migrations), every index",
        "claim size": why,
        "transactions": _transactions(claim),
        "claim": "one UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING",
    }
    label = f"raw psycopg, batched like a worker (claims of {claim})"
    return [Measurement("throughput.raw.postgres.batched.process", label, "jobs/s", values,
                        settings, note=NOTE)]  # fmt: skip


# The baseline of each jobfsm store (throughput.py's system names), by claim size.
BASELINES: dict[str, Callable[[Config, int, str], list[Measurement]]] = {
    "sqlite": sqlite_rows,
    "postgres": postgres_rows,
}
