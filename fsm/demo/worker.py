"""One demo worker process: `python -m fsm.demo.worker --queue Q ...`.

A real OS process running `fsm.worker.Worker` with the demo's handlers over the
store the driver names in $JOBFSM_STORE (never on the command line, where `ps`
would show a password); the driver kills it with SIGKILL and starts another.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import click

from ..registry import STORE_ENV, open_store
from ..service.engine import Engine
from ..worker import Worker
from .app import handlers
from .policy import demo_policy

#: longest a worker may take to start before the driver stops waiting to hear it is up
STARTUP_BOUND = 120.0


@click.command()
@click.option("--queue", required=True)
@click.option("--concurrency", type=click.IntRange(1, 64), default=4)
@click.option("--seed", type=int, default=0)
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None)
def main(queue: str, concurrency: int, seed: int, ready_file: str | None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(message)s")
    if not os.environ.get(STORE_ENV):
        raise click.UsageError(f"${STORE_ENV} must name the store (the demo driver sets it)")
    engine = Engine(open_store(), policy=demo_policy(seed))
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
        if ready_file is not None:

            def announce() -> None:
                if worker.wait_started(STARTUP_BOUND):
                    Path(ready_file).touch()

            threading.Thread(target=announce, daemon=True).start()
        worker.run()
    finally:
        engine.store.close()


if __name__ == "__main__":
    main()
