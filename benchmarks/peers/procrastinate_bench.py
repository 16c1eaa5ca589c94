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

from benchmarks import runner
from benchmarks.harness import Config, version_of
from benchmarks.machine import Meter
from benchmarks.peers.procrastinate_app import DSN_ENV, make_app
from benchmarks.services import fresh_database

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
    jobs: int, processes: int, concurrency: int, folder: Path, *, meter: Meter | None = None
) -> tuple[float, float]:
    """(jobs/s from the first batch_defer until `jobs` jobs succeeded, workers warm
    (`runner.drain`); worker CPU microseconds per job); `meter` also splits the whole
    machine's CPU of that window."""
    argv = ["procrastinate", f"--app={APP_PATH}", "worker", f"--concurrency={concurrency}"]
    with fresh_database() as url:
        app = make_app(url).open()
        try:
            app.schema_manager.apply_schema()
            task = app.tasks["noop"]
            with (
                runner.Workers(
                    folder / runner.run_name("procrastinate"), {DSN_ENV: url}
                ) as workers,
                psycopg.connect(url, autocommit=True) as probe,
            ):
                for _ in range(processes):
                    workers.start(*argv)

                def listening() -> bool:  # each worker's listener connection has run LISTEN
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
                    ).fetchone()
                    return bool(row and row[0] >= processes)

                what = f"{processes} procrastinate workers to LISTEN"
                workers.wait(listening, runner.START_TIMEOUT, what)
                system = runner.Counted(
                    lambda n: task.batch_defer(*({} for _ in range(n))),
                    lambda: _count(probe, "succeeded"),
                    workers,
                    step=0.01,
                )
                got = runner.drain(workers, system, processes * concurrency, jobs, meter)
                failed = _count(probe, "failed")
        finally:
            app.close()
    if failed:
        raise RuntimeError(f"benchmark: {failed} procrastinate jobs failed")
    return got.rates[0], got.cpu_us


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
    meters = [Meter() for _ in range(cfg.repeats)]
    runs = [process_rate(cfg.jobs, processes, concurrency, cfg.tmp, meter=m) for m in meters]
    return [r[0] for r in runs], [r[1] for r in runs], meters
