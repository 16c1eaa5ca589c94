"""The no-op app every jobfsm throughput figure runs, and the batches it is submitted in.

    JOBFSM_BENCH_QUEUE=name python -m fsm.cli worker --app benchmarks.noop:handlers ...

A worker process serves the queue named by `QUEUE_ENV` (default "bench"); the
benchmark builds the same handlers for its own engine with `make_handlers(queue)`,
so both sides agree on the kind's policy.
"""

from __future__ import annotations

import os

from fsm import Engine, Job, open_store
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

QUEUE_ENV = "JOBFSM_BENCH_QUEUE"
APP = "benchmarks.noop:handlers"
BATCH = 1_000  # jobs per submit_many


def make_handlers(queue: str) -> Handlers:
    handlers = Handlers()

    @handlers.handler("noop", queue=queue)
    def noop(ctx: Context) -> None:
        return None

    return handlers


def engine_for(url: str, queue: str = "bench") -> Engine:
    """An engine on `url` that knows the no-op kind's policy."""
    return Engine(open_store(url), kinds={"noop": make_handlers(queue)["noop"].policy})


def submit(engine: Engine, n: int, batch: int = BATCH) -> list[Job]:
    """`n` no-op jobs in `submit_many` calls of `batch`; the jobs in order."""
    jobs: list[Job] = []
    for start in range(0, n, batch):
        jobs += engine.submit_many([("noop", None, {})] * min(batch, n - start))
    return jobs


# What `jobfsm worker --app benchmarks.noop:handlers` runs: the queue is per run.
handlers = make_handlers(os.environ.get(QUEUE_ENV, "bench"))
