"""A jobfsm worker that only polls: the PostgreSQL store without its LISTEN wake-ups.

    BENCH_STAMPS=/tmp/s python -m benchmarks.polling_worker URL QUEUE POLL_INTERVAL \
        CONCURRENCY READY_FILE

`jobfsm worker --delivery poll` on PostgreSQL waits on LISTEN/NOTIFY between polls;
the latency suite's "polling only" row measures what a store without notifications
gives (a claim every `POLL_INTERVAL` seconds), so this worker's `PollingDelivery`
is given no store to wait on. Everything else is the CLI worker's: the same `Worker`,
the stamp handlers (`benchmarks.stamp_app`), a ready file, SIGTERM to stop.
"""

from __future__ import annotations

import sys
from pathlib import Path

from adapters.polling import PollingDelivery
from benchmarks.stamp_app import make_handlers
from fsm import Engine, open_store
from fsm.cli.worker_cmd import ReadyFile
from fsm.worker import Worker


def main(argv: list[str]) -> None:
    url, queue, interval, concurrency, ready = argv
    engine = Engine(open_store(url))
    handlers, _ = make_handlers(queue)
    worker = Worker(
        engine,
        handlers,
        delivery=PollingDelivery(None, poll_interval=float(interval)),
        queues=[queue],
        concurrency=int(concurrency),
        poll_interval=float(interval),
        scheduler=False,
    )
    marker = ReadyFile(worker, Path(ready))
    marker.start()
    try:
        worker.run()
    finally:
        marker.stop()
        engine.store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
