"""The dramatiq module the benchmark's workers run: one no-op actor named "noop".

    BENCH_DRAMATIQ_QUEUE=name python -m dramatiq benchmarks.peers.dramatiq_app --processes 1

The broker is dramatiq's RabbitmqBroker with its defaults (publisher confirms off);
the benchmark builds its own client broker with `make(queue)` for every run. A second
actor, "stamp" (`stamp_actor`), stamps its start for the latency suite
(`benchmarks.stamps`).
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from benchmarks.harness import AMQP_URL
from benchmarks.stamps import stamp

QUEUE_ENV = "BENCH_DRAMATIQ_QUEUE"


def nothing() -> None:
    return None


def make(queue: str, confirm: bool = False) -> tuple[RabbitmqBroker, dramatiq.Actor[[], None]]:
    """The broker (publisher confirms off by default, dramatiq's default) and the actor."""
    broker = RabbitmqBroker(url=AMQP_URL, confirm_delivery=confirm)
    actor = dramatiq.actor(actor_name="noop", queue_name=queue, broker=broker)(nothing)
    return broker, actor


def stamp_actor(broker: RabbitmqBroker, queue: str) -> dramatiq.Actor[[int], None]:
    """The latency suite's actor on `queue`: `send(n)` runs `stamp(n)`."""
    return dramatiq.actor(actor_name="stamp", queue_name=queue, broker=broker)(stamp)


if QUEUE_ENV in os.environ:  # the worker process: the CLI takes the global broker
    broker, actor = make(os.environ[QUEUE_ENV])
    stamper = stamp_actor(broker, os.environ[QUEUE_ENV])
    dramatiq.set_broker(broker)
