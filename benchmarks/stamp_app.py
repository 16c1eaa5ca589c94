"""The jobfsm app of the latency suite: the kind "stamp", whose handler stamps its start.

    JOBFSM_BENCH_QUEUE=q BENCH_STAMPS=/tmp/s python -m fsm.cli worker \\
        --app benchmarks.stamp_app:handlers

`handlers` run it as a plain function (the thread executor), `async_handlers` as an
`async def` (the asyncio executor); the payload is `{"n": <job number>}`
(`benchmarks.stamps`).
"""

from __future__ import annotations

import os

from benchmarks.noop import QUEUE_ENV
from benchmarks.stamps import stamp
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

KIND = "stamp"


def make_handlers(queue: str) -> tuple[Handlers, Handlers]:
    """(the thread executor's handlers, the asyncio executor's) of `queue`."""
    sync, asynchronous = Handlers(), Handlers()

    @sync.handler(KIND, queue=queue)
    def run(ctx: Context) -> None:
        stamp(ctx.payload["n"])

    @asynchronous.handler(KIND, queue=queue)
    async def arun(ctx: Context) -> None:
        stamp(ctx.payload["n"])

    return sync, asynchronous


# What `jobfsm worker --app benchmarks.stamp_app:handlers` (or `:async_handlers`) runs.
handlers, async_handlers = make_handlers(os.environ.get(QUEUE_ENV, "bench"))
