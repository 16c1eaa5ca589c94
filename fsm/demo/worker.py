"""One demo worker process: `python -m fsm.demo.worker --store URL --queue Q ...`.

A real OS process running `fsm.worker.Worker` with the demo's handlers over the
store the driver names; the driver kills it with SIGKILL and starts another.
"""

from __future__ import annotations

import logging

import click

from ..engine import Engine
from ..registry import open_store
from ..worker import Worker
from .app import handlers
from .policy import demo_policy


@click.command()
@click.option("--store", required=True)
@click.option("--queue", required=True)
@click.option("--concurrency", type=click.IntRange(1, 64), default=4)
@click.option("--seed", type=int, default=0)
def main(store: str, queue: str, concurrency: int, seed: int) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(message)s")
    engine = Engine(open_store(store), policy=demo_policy(seed))
    try:
        worker = Worker(
            engine,
            handlers,
            executor="thread",
            queues=[queue],
            concurrency=concurrency,
            poll_interval=0.2,
            shutdown_grace=5.0,
        )
        worker.run()
    finally:
        engine.store.close()


if __name__ == "__main__":
    main()
