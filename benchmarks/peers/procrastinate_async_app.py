"""procrastinate's app for the asyncio benchmark: one async task that awaits 0.05 s.

    BENCH_PROCRASTINATE_DSN=postgresql://... python -m procrastinate \
        --app=benchmarks.peers.procrastinate_async_app.app worker --concurrency 200
"""

from __future__ import annotations

import asyncio
import os

from procrastinate import App, PsycopgConnector

from benchmarks.peers.procrastinate_app import DSN_ENV

#: seconds each job awaits (benchmarks.asyncio_bench.SLEEP)
SLEEP = 0.05


def make_app(dsn: str) -> App:
    app = App(connector=PsycopgConnector(conninfo=dsn))

    @app.task(name="io_async")
    async def io_async() -> None:
        await asyncio.sleep(SLEEP)

    return app


app = make_app(os.environ.get(DSN_ENV, ""))
