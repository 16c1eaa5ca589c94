"""The procrastinate app the benchmark's workers run: one no-op task named "noop".

    BENCH_PROCRASTINATE_DSN=postgresql://... python -m procrastinate \
        --app=benchmarks.peers.procrastinate_app.app worker --concurrency 1

The benchmark builds its own client app with `make_app(dsn)` (the same task), so that
every run talks to its own fresh database. A second task, "stamp", stamps its start
for the latency suite (`benchmarks.stamps`).
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from benchmarks.stamps import stamp

DSN_ENV = "BENCH_PROCRASTINATE_DSN"


def make_app(dsn: str) -> App:
    app = App(connector=PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    def noop() -> None:
        return None

    app.task(name="stamp")(stamp)  # the latency suite's: defer(n=...)
    return app


app = make_app(os.environ.get(DSN_ENV, ""))
