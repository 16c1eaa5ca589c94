"""procrastinate on PostgreSQL: enqueue rates and process rates of no-op jobs.

Every run gets a fresh database with procrastinate's schema applied, dropped after.
"Done" is procrastinate's own record: rows of `procrastinate_jobs` with status
`succeeded` (jobs are kept: `delete_jobs` is "never" by default), polled every 10 ms
from a separate connection, so a figure's end is late by at most one poll.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks._services import fresh_database
from benchmarks.harness import Config, version_of, wait_for
from benchmarks.machine import Meter
from benchmarks.peers._common import START_TIMEOUT, Workers, drain_timeout, run_name
from benchmarks.peers.procrastinate_app import DSN_ENV, make_app

APP_PATH = "benchmarks.peers.procrastinate_app.app"
DOCS = "https://procrastinate.readthedocs.io/en/stable/"


def settings(**extra: Any) -> dict[str, Any]:
    return {
        "version": version_of("procrastinate"),
        "psycopg": version_of("psycopg"),
        "connector": "PsycopgConnector (psycopg 3 pool, defaults)",
        "enqueue durability": "committed to PostgreSQL (server's synchronous_commit) "
        "before defer returns",
        "records written": "an event row per status change, by trigger: 3 per job "
        "(deferred, started, succeeded); no owner, fence or attempt",
        **extra,
        "docs": DOCS,
    }


WORKER_SETTINGS = {
    "listen/notify": "on (default)",
    "fetch job polling interval": "5 s (default)",
    "delete jobs": "never (default)",
    "enqueue": "one batch_defer of all jobs",
}


def _count(conn: psycopg.Connection[tuple[Any, ...]], status: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM procrastinate_jobs WHERE status = %s", (status,)
    ).fetchone()
    return int(row[0]) if row else 0


def enqueue_rate(jobs: int, batch: bool) -> float:
    """Jobs/s deferred with no worker running: `defer` one at a time, or one `batch_defer`."""
    with fresh_database() as url:
        app = make_app(url).open()
        try:
            app.schema_manager.apply_schema()
            task = app.tasks["noop"]
            task.defer()  # warm-up: opens the pool's connection; not timed
            started = time.perf_counter()
            if batch:
                task.batch_defer(*({} for _ in range(jobs)))
            else:
                for _ in range(jobs):
                    task.defer()
            elapsed = time.perf_counter() - started
            with psycopg.connect(url, autocommit=True) as conn:
                queued = _count(conn, "todo")
        finally:
            app.close()
    if queued != jobs + 1:
        raise RuntimeError(f"benchmark: procrastinate holds {queued} of {jobs + 1} deferred jobs")
    return jobs / elapsed


def process_rate(
    jobs: int, processes: int, concurrency: int, log: Path, *, meter: Meter | None = None
) -> tuple[float, float]:
    """(jobs/s from the first batch_defer until `jobs` jobs succeeded, workers warm;
    worker CPU microseconds per job); `meter` also splits the whole machine's CPU of
    that window."""
    argv = ["procrastinate", f"--app={APP_PATH}", "worker", f"--concurrency={concurrency}"]
    with fresh_database() as url:
        app = make_app(url).open()
        try:
            app.schema_manager.apply_schema()
            task = app.tasks["noop"]
            with (
                Workers([argv] * processes, {DSN_ENV: url}, log) as workers,
                psycopg.connect(url, autocommit=True) as probe,
            ):

                def listening() -> bool:  # each worker's listener connection has run LISTEN
                    workers.check()
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
                    ).fetchone()
                    return bool(row and row[0] >= processes)

                wait_for(listening, START_TIMEOUT, f"{processes} procrastinate workers to LISTEN")
                warm = processes * concurrency
                task.batch_defer(*({} for _ in range(warm)))
                wait_for(
                    lambda: _count(probe, "succeeded") >= warm,
                    START_TIMEOUT,
                    "procrastinate warm-up jobs",
                )
                target = warm + jobs

                def finished() -> bool:
                    workers.check()
                    return _count(probe, "succeeded") >= target

                if meter is not None:
                    meter.start(workers.cpu_seconds)
                cpu = workers.cpu_seconds()
                started = time.perf_counter()
                task.batch_defer(*({} for _ in range(jobs)))
                wait_for(finished, drain_timeout(jobs), f"{jobs} procrastinate jobs", step=0.01)
                elapsed = time.perf_counter() - started
                cpu = workers.cpu_seconds() - cpu
                if meter is not None:
                    meter.stop(jobs)
                failed = _count(probe, "failed")
        finally:
            app.close()
    if failed:
        raise RuntimeError(f"benchmark: {failed} procrastinate jobs failed")
    return jobs / elapsed, cpu / jobs * 1e6


def enqueue_runs(cfg: Config) -> dict[str, list[float]]:
    single, batch = [], []
    for _ in range(cfg.repeats):
        single.append(enqueue_rate(cfg.jobs, batch=False))
        batch.append(enqueue_rate(cfg.jobs, batch=True))
    return {"defer": single, "batch": batch}


def process_runs(
    cfg: Config, processes: int, concurrency: int
) -> tuple[list[float], list[float], list[Meter]]:
    """(jobs/s, worker CPU microseconds per job, the machine's CPU) of `cfg.repeats` runs."""
    log = cfg.tmp / f"{run_name('procrastinate')}.log"
    meters = [Meter() for _ in range(cfg.repeats)]
    runs = [process_rate(cfg.jobs, processes, concurrency, log, meter=m) for m in meters]
    return [r[0] for r in runs], [r[1] for r in runs], meters
