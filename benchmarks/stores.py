"""Store benchmarks: full job lifecycles per second and lease latency, against raw baselines.

    python benchmarks/stores.py [--store sqlite] [--full] [--jobs N]

Every figure is printed next to a baseline measured in the same run:

- lifecycles/s: each job is submitted, leased, started and succeeded, each step
  its own transaction (as a worker does it), by 1 and by 4 worker processes.
  Baseline: the same row changes (job row and audit row per step, the same
  transactions) written with the raw driver and no engine. Ratio engine/raw
  (target >= 0.6).
- lease latency: p50/p99 of leasing one job with 10,000 queued jobs next to
  100,000 (default) or 1,000,000 (--full) finished jobs; baseline: the same
  with no finished jobs (SQLite: both files in one process, leases alternated).
  Ratio loaded/empty (target <= 2).

Each store is one function in STORES; `main` prints its rows through the
shared printer. The PostgreSQL part plugs in at `postgres_benchmarks` below.
The machine has 2 cores and other work runs beside it: figures move between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import attrs  # noqa: E402

from benchmarks import fill  # noqa: E402
from benchmarks.rows import audit_values, inserts, job_values, owner_text  # noqa: E402
from benchmarks.services import create_database, drop_database  # noqa: E402
from fsm import Engine, Job, Owner, open_store  # noqa: E402
from fsm.records import AuditEntry, new_id  # noqa: E402

#: bound on one child process of a benchmark
CHILD_TIMEOUT = 900.0
#: busy timeout for engine and raw alike: 4 writer processes on a loaded 2-core
#: machine can wait longer than the 5 s default for SQLite's write lock
BUSY_MS = 60_000


# --- the shared runner and printer ---------------------------------------------------------


@attrs.frozen
class Row:
    """One printed figure with its same-run baseline."""

    store: str
    what: str
    value: float
    baseline: float
    unit: str
    target: str
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


def print_rows(rows: list[Row]) -> None:
    print(f"{'store':<22} {'measure':<44} {'value':>12} {'baseline':>12}  {'ratio':>6}  target")
    for r in rows:
        print(
            f"{r.store:<22} {r.what:<44} {r.value:>12.1f} {r.baseline:>12.1f}  "
            f"{r.ratio:>6.2f}  {r.target} ({r.unit})"
        )


def children(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Start a child of this script (`--child ARGV`) per argv at once; collect the JSON
    line each prints last."""
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for argv in argvs
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=CHILD_TIMEOUT)
        if p.returncode != 0:
            raise SystemExit(f"benchmark child failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def throughput(results: list[dict[str, Any]]) -> float:
    """Jobs per second over the span from the first child's start to the last one's end."""
    jobs = sum(r["jobs"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return jobs / span


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- lifecycles: engine and raw children ---------------------------------------------------


def engine_lifecycles(url: str, jobs: int, name: str) -> dict[str, Any]:
    store = open_store(url)
    engine = Engine(store)
    me = Owner("bench", os.getpid(), name)
    done = 0
    start = time.time()

    def work() -> int:
        for leased in engine.claim(me, limit=1):
            running = engine.start(leased.id, leased.fence)
            engine.succeed(running.id, running.fence, None)
            return 1
        return 0

    for i in range(jobs):
        engine.submit("bench", {"i": i})
        done += work()
    while n := work():  # jobs other workers left behind
        done += n
    end = time.time()
    store.close()
    return {"jobs": done, "start": start, "end": end}


#: a raw session: (the connection, run-in-one-transaction, the driver's placeholder)
Session = tuple[Any, Callable[[Callable[[], Any]], Any], str]

#: the oldest due job, one at a time; PostgreSQL skips rows another client has locked
SQLITE_LEASE = (
    "SELECT id, fence, version FROM jobs WHERE state IN ('queued','retry_wait') "
    "AND queue IN ('default') AND run_after <= ? AND (deadline IS NULL OR deadline > ?) "
    "ORDER BY priority, run_after, id LIMIT 1"
)
PG_LEASE = (
    "SELECT id, fence, version FROM jobs WHERE state IN ('queued','retry_wait') "
    "AND queue = 'default' AND run_after <= %s AND (deadline IS NULL OR deadline > %s) "
    "ORDER BY priority, run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)


@contextmanager
def sqlite_session(path: str, sync: str) -> Iterator[Session]:
    """sqlite3 in autocommit mode; a transaction is BEGIN IMMEDIATE ... COMMIT."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
    conn.execute(f"PRAGMA synchronous = {sync}")

    def tx(fn: Callable[[], Any]) -> Any:
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = fn()
            conn.execute("COMMIT")
            return value
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    try:
        yield conn, tx, "?"
    finally:
        conn.close()


@contextmanager
def postgres_session(url: str, schema: str) -> Iterator[Session]:
    """psycopg, its implicit transaction committed after each step."""
    import psycopg

    conn = psycopg.connect(url)
    conn.execute(f"SET search_path TO {schema}")
    conn.commit()

    def tx(fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        return value

    try:
        yield conn, tx, "%s"
    finally:
        conn.close()


def raw_lifecycles(
    session: AbstractContextManager[Session], lease_sql: str, jobs: int, name: str
) -> dict[str, Any]:
    """The engine's rows and transactions with the driver and hand-written SQL, no
    engine: submit; lease (`lease_sql`); start and succeed, each reading the version
    and writing the job row with compare-and-set plus its audit row."""
    with session as (conn, tx, mark):
        add_job, add_audit = inserts(mark)
        owner = owner_text(Owner("bench", os.getpid(), name))
        leased = (
            "UPDATE jobs SET state = 'leased', fence = ?, owner = ?, lease_until = ?, "
            "version = ?, updated_at = ? WHERE id = ? AND version = ?"
        ).replace("?", mark)
        version_of = "SELECT version FROM jobs WHERE id = ?".replace("?", mark)
        moved = (
            "UPDATE jobs SET state = ?, version = ?, updated_at = ?, {} "
            "WHERE id = ? AND version = ?"
        )
        started = moved.format("attempt = attempt + 1, started_at = ?").replace("?", mark)
        finished = moved.format(
            "owner = NULL, lease_until = NULL, result_json = 'null', finished_at = ?"
        ).replace("?", mark)

        def audit(job_id: str, version: int, event: str, move: Move, fence: int) -> None:
            entry = AuditEntry(job_id, version, time.time(), event, move[0], move[1], fence, 0)
            conn.execute(add_audit, audit_values(entry))

        def submit(i: int) -> None:
            now = time.time()
            job = Job(
                new_id(now), "bench", "default", json.dumps({"i": i}), "queued", now, now, now
            )
            conn.execute(add_job, job_values(job))
            audit(job.id, 1, "submit", (None, "queued"), 0)

        def lease() -> str | None:
            now = time.time()
            row = conn.execute(lease_sql, (now, now)).fetchone()
            if row is None:
                return None
            job_id, fence, version = row
            conn.execute(leased, (fence + 1, owner, now + 30, version + 1, now, job_id, version))
            audit(job_id, version + 1, "lease", ("queued", "leased"), fence + 1)
            return str(job_id)

        def step(job_id: str, event: str, move: Move, update: str, *values: Any) -> None:
            version = conn.execute(version_of, (job_id,)).fetchone()[0]
            now = time.time()
            cur = conn.execute(update, (move[1], version + 1, now, *values, job_id, version))
            assert cur.rowcount == 1
            audit(job_id, version + 1, event, move, 1)

        def work() -> int:
            job_id = tx(lease)
            if job_id is None:
                return 0
            tx(lambda: step(job_id, "start", ("leased", "running"), started, time.time()))
            tx(lambda: step(job_id, "succeed", ("running", "succeeded"), finished, time.time()))
            return 1

        done = 0
        start = time.time()
        for i in range(jobs):
            tx(lambda i=i: submit(i))
            done += work()
        while n := work():  # jobs other workers left behind
            done += n
        end = time.time()
    return {"jobs": done, "start": start, "end": end}


Move = tuple[str | None, str]


def lease_latencies(url: str, finished: int, queued: int, samples: int) -> dict[str, Any]:
    """Fill the store (finished rows written in bulk), then time `samples` single leases."""
    store = open_store(url)
    engine = Engine(store)
    now = time.time()
    batch: list[tuple[str, Any, dict[str, Any]]] = []
    for i in range(queued):
        batch.append(("bench", {"i": i}, {"priority": i % 10}))
        if len(batch) == 5000:
            engine.submit_many(batch)
            batch = []
    if batch:
        engine.submit_many(batch)
    if finished:
        fill.finished_sqlite(url, finished, now)
    me = Owner("bench", os.getpid(), "latency")
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        leased = engine.claim(me, limit=1)
        times.append(time.perf_counter() - t0)
        assert len(leased) == 1
    store.close()
    return {"p50": percentile(times, 0.5) * 1000, "p99": percentile(times, 0.99) * 1000}


def paired_lease_latencies(
    loaded_url: str, empty_url: str, finished: int, queued: int, samples: int
) -> dict[str, Any]:
    """Both stores in one process, leases alternated, so load spikes hit both alike."""
    engines = {}
    for label, url in (("loaded", loaded_url), ("empty", empty_url)):
        store = open_store(url)
        engine = Engine(store)
        items = [("bench", {"i": i}, {"priority": i % 10}) for i in range(queued)]
        for start in range(0, queued, 5000):
            engine.submit_many(items[start : start + 5000])
        if label == "loaded":
            fill.finished_sqlite(url, finished, time.time())
        engines[label] = engine
    me = Owner("bench", os.getpid(), "latency")
    times: dict[str, list[float]] = {"loaded": [], "empty": []}
    for _ in range(samples):
        for label, engine in engines.items():
            t0 = time.perf_counter()
            leased = engine.claim(me, limit=1)
            times[label].append(time.perf_counter() - t0)
            assert len(leased) == 1
    for engine in engines.values():
        engine.store.close()
    return {
        label: {"p50": percentile(t, 0.5) * 1000, "p99": percentile(t, 0.99) * 1000}
        for label, t in times.items()
    }


# --- SQLite -------------------------------------------------------------------------------


def sqlite_benchmarks(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    folder = Path(tempfile.mkdtemp(prefix="jobfsm-bench-"))
    for sync in ("FULL", "NORMAL"):
        for workers in (1, 4):
            per = max(1, args.jobs // workers)
            figures = {}
            for mode in ("engine", "raw"):
                db = folder / f"{mode}-{sync}-{workers}.db"
                url = f"sqlite:///{db}?synchronous={sync}&busy_timeout_ms={BUSY_MS}"
                open_store(url).close()  # same migrated schema for both
                child = ["engine", url] if mode == "engine" else ["raw-sqlite", str(db), sync]
                figures[mode] = throughput(
                    children([[*child, str(per), f"w{i}"] for i in range(workers)])
                )
            rows.append(
                Row(
                    f"sqlite sync={sync}",
                    f"lifecycles/s, {workers} worker process(es)",
                    figures["engine"],
                    figures["raw"],
                    "jobs/s; baseline raw sqlite3",
                    ">= 0.6",
                )
            )
    finished = 1_000_000 if args.full else 100_000
    loaded, empty = (f"sqlite:///{folder / f'latency-{x}.db'}" for x in ("loaded", "empty"))
    (latency,) = children([["latency-pair", loaded, empty, str(finished), "10000", "500"]])
    for q in ("p50", "p99"):
        rows.append(
            Row(
                "sqlite sync=FULL",
                f"lease latency {q}, {finished:,} finished + 10,000 queued",
                latency["loaded"][q],
                latency["empty"][q],
                "ms; baseline 10,000 queued only",
                "<= 2",
                higher_is_better=False,
            )
        )
    return rows


# --- PostgreSQL ---------------------------------------------------------------------------


def batch_submit(db: str, n: int) -> tuple[float, float, float]:
    """Jobs/s of Engine.submit_many(n), of store.insert of n ready decisions, and of raw
    COPY of the same job and audit rows."""
    import psycopg

    from benchmarks.rows import AUDIT_COLUMNS, JOB_COLUMNS

    engine = Engine(open_store(f"{db}?schema=submit_engine"))
    engine.submit_many([("bench", {"i": i}, {}) for i in range(1000)])  # warm-up
    t0 = time.perf_counter()
    engine.submit_many([("bench", {"i": i}, {}) for i in range(n)])
    engine_rate = n / (time.perf_counter() - t0)
    ready = [engine.kernel.submit_decision(time.time(), "bench", {"i": i}) for i in range(n)]
    t0 = time.perf_counter()
    engine.store.insert(ready)
    insert_rate = n / (time.perf_counter() - t0)
    engine.store.close()

    open_store(f"{db}?schema=submit_raw").close()  # the same schema, migrated
    raw = Engine(open_store("memory://"))
    decisions = [raw.kernel.submit_decision(time.time(), "bench", {"i": i}) for i in range(n)]
    with psycopg.connect(db) as conn:
        conn.execute("SET search_path TO submit_raw")
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(f"COPY jobs ({', '.join(JOB_COLUMNS)}) FROM STDIN") as copy:
                for d in decisions:
                    copy.write_row(job_values(d.job))
            with cur.copy(f"COPY job_events ({', '.join(AUDIT_COLUMNS)}) FROM STDIN") as copy:
                for d in decisions:
                    assert d.entry is not None
                    copy.write_row(audit_values(d.entry))
        conn.commit()
        raw_rate = n / (time.perf_counter() - t0)
    return engine_rate, insert_rate, raw_rate


def postgres_benchmarks(args: argparse.Namespace) -> list[Row]:
    """Lifecycles/s (1 and 4 processes) against raw psycopg, batch submit against raw
    COPY, and lease latency with many finished rows against none, on a fresh database."""

    rows: list[Row] = []
    name, db = create_database()
    try:
        for workers in (1, 4):
            per = max(1, args.jobs // workers)
            figures = {}
            for mode in ("engine", "raw"):
                schema = f"{mode}_{workers}"
                url = f"{db}?schema={schema}&pool_max=2"
                open_store(url).close()  # same migrated schema for both
                child = ["engine", url] if mode == "engine" else ["raw-postgres", db, schema]
                figures[mode] = throughput(
                    children([[*child, str(per), f"w{i}"] for i in range(workers)])
                )
            rows.append(
                Row(
                    "postgres",
                    f"lifecycles/s, {workers} worker process(es)",
                    figures["engine"],
                    figures["raw"],
                    "jobs/s; baseline raw psycopg",
                    ">= 0.6",
                )
            )
        engine_rate, insert_rate, raw_rate = batch_submit(db, 10_000)
        for what, rate in (("Engine.submit_many", engine_rate), ("store.insert", insert_rate)):
            rows.append(
                Row(
                    "postgres",
                    f"batch submit of 10,000 jobs ({what})",
                    rate,
                    raw_rate,
                    "jobs/s; baseline raw COPY of the same rows",
                    ">= 5,000 jobs/s",
                )
            )
        finished = 1_000_000 if args.full else 100_000
        loaded_url = f"{db}?schema=latency_loaded"
        open_store(loaded_url).close()
        fill.finished_postgres(db, "latency_loaded", finished)
        loaded = lease_latencies(loaded_url, 0, 10_000, 500)
        empty = lease_latencies(f"{db}?schema=latency_empty", 0, 10_000, 500)
        for q in ("p50", "p99"):
            rows.append(
                Row(
                    "postgres",
                    f"lease latency {q}, {finished:,} finished + 10,000 queued",
                    loaded[q],
                    empty[q],
                    "ms; baseline 10,000 queued only",
                    "<= 2",
                    higher_is_better=False,
                )
            )
    finally:
        drop_database(name)
    return rows


STORES: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "sqlite": sqlite_benchmarks,
    "postgres": postgres_benchmarks,
}


def child(argv: list[str]) -> None:
    """One child of `children`: its figures as one JSON line on stdout."""
    kind = argv[0]
    if kind == "engine":
        url, jobs, name = argv[1:]
        result = engine_lifecycles(url, int(jobs), name)
    elif kind == "raw-sqlite":
        path, sync, jobs, name = argv[1:]
        result = raw_lifecycles(sqlite_session(path, sync), SQLITE_LEASE, int(jobs), name)
    elif kind == "raw-postgres":
        url, schema, jobs, name = argv[1:]
        result = raw_lifecycles(postgres_session(url, schema), PG_LEASE, int(jobs), name)
    elif kind == "latency-pair":
        loaded, empty, finished, queued, samples = argv[1:]
        result = paired_lease_latencies(loaded, empty, int(finished), int(queued), int(samples))
    else:
        raise SystemExit(f"unknown child mode {kind!r}")
    print(json.dumps(result))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="comma-separated: " + ",".join(STORES))
    parser.add_argument("--jobs", type=int, default=2000, help="lifecycles per measurement")
    parser.add_argument("--full", action="store_true", help="1,000,000 finished rows")
    args = parser.parse_args()
    rows: list[Row] = []
    for name in args.store.split(","):
        if name not in STORES:
            raise SystemExit(f"unknown store {name!r}; known: {', '.join(STORES)}")
        rows.extend(STORES[name](args))
    print_rows(rows)


if __name__ == "__main__":
    main()
