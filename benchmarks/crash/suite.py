"""The crash-recovery suite's plan: every scenario of `benchmarks.crash`, run concurrently.

The scenarios mostly sleep, so they run in threads, each in its own PostgreSQL
database, SQLite file or RabbitMQ queue. The first task to run starts them all; every
task then returns its own scenario's measurement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from benchmarks.crash import jobfsm_runs as j
from benchmarks.crash import peers as p
from benchmarks.harness import Config, Measurement, Task

QUICK_THREADS = 7  # scenarios at once in quick mode (2 cores: worker start-ups compete)


class _Batch:
    """Runs every scenario concurrently on first use; hands each task its own result."""

    def __init__(self, scenarios: dict[str, Callable[[], Measurement]], threads: int) -> None:
        self.scenarios = scenarios
        self.threads = threads
        self.futures: dict[str, Future[Measurement]] | None = None
        self.lock = threading.Lock()

    def take(self, key: str) -> list[Measurement]:
        with self.lock:
            if self.futures is None:
                pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="crash")
                self.futures = {k: pool.submit(run) for k, run in self.scenarios.items()}
                pool.shutdown(wait=False)
        return [self.futures[key].result()]


#: scenarios that take longest (they wait out the whole bound, or a lease), started first
SLOW_FIRST = (
    "recovery.procrastinate.default",
    "recovery.celery.acks_early",
    "recovery.celery.acks_late",
    "recovery.jobfsm.sqlite.zombie",
    "recovery.jobfsm.postgres.zombie",
    "recovery.dramatiq.zombie",
    "recovery.celery.zombie",
)


def scenarios(cfg: Config) -> dict[str, tuple[str, Callable[[], Measurement]]]:
    """key -> (label, run), in the order of the report: jobfsm, then each peer."""
    return {
        "recovery.jobfsm.sqlite.same_host": (
            "jobfsm sqlite kill -9",
            partial(j.kill, cfg, "sqlite", False),
        ),
        "recovery.jobfsm.postgres.same_host": (
            "jobfsm postgres kill -9",
            partial(j.kill, cfg, "postgres", False),
        ),
        "recovery.jobfsm.postgres.cross_host": (
            "jobfsm postgres kill -9, other host",
            partial(j.kill, cfg, "postgres", True),
        ),
        "recovery.jobfsm.sqlite.zombie": ("jobfsm sqlite zombie", partial(j.zombie, cfg, "sqlite")),
        "recovery.jobfsm.postgres.zombie": (
            "jobfsm postgres zombie",
            partial(j.zombie, cfg, "postgres"),
        ),
        "recovery.procrastinate.default": (
            "procrastinate kill -9, default",
            partial(p.procrastinate, cfg, False),
        ),
        "recovery.procrastinate.recipe": (
            "procrastinate kill -9, recipe",
            partial(p.procrastinate, cfg, True),
        ),
        "recovery.dramatiq.default": ("dramatiq kill -9", partial(p.dramatiq, cfg)),
        "recovery.dramatiq.zombie": ("dramatiq zombie", partial(p.zombie, cfg, "dramatiq")),
        "recovery.celery.acks_early": ("celery kill -9, acks early", partial(p.celery, cfg, False)),
        "recovery.celery.acks_late": ("celery kill -9, acks_late", partial(p.celery, cfg, True)),
        "recovery.celery.acks_late_reject": (
            "celery kill -9, acks_late + reject_on_worker_lost",
            partial(p.celery, cfg, True, True),
        ),
        "recovery.celery.zombie": ("celery zombie", partial(p.zombie, cfg, "celery")),
    }


def plan(cfg: Config) -> list[Task]:
    found = scenarios(cfg)
    order = [k for k in SLOW_FIRST if k in found] + [k for k in found if k not in SLOW_FIRST]
    threads = QUICK_THREADS if cfg.quick else len(found)
    batch = _Batch({key: found[key][1] for key in order}, threads)
    return [
        Task(f"recovery: {label}", partial(batch.take, key)) for key, (label, _) in found.items()
    ]
