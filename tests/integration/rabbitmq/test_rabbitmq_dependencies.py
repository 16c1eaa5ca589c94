"""Dependent jobs woken through RabbitMQ: a released job is announced like a new one.

A worker that learns of work only through the broker (its repair sweep far off)
runs a chain A -> B -> C: B and C are leased only because their release published
a wake-up, so the chain finishes in seconds, in order.
"""

from __future__ import annotations

import threading
from typing import Any

from adapters.rabbitmq import RabbitDelivery
from fsm import Engine, open_store
from fsm.service.identity import Identity
from fsm.worker import Worker

from .helpers import wait_until

#: far beyond the test's bound: no job of this test is found by the repair sweep
REPAIR_AFTER = 300.0


def test_a_chain_of_dependents_runs_through_wake_ups_of_their_release(
    rabbit_url: str, prefix: str, sqlite_url: str
) -> None:
    # given: a worker woken only through RabbitMQ, and a chain A -> B -> C
    engine = Engine(open_store(sqlite_url))
    delivery = RabbitDelivery(
        rabbit_url,
        engine=engine,
        prefix=prefix,
        repair_after=REPAIR_AFTER,
        repair_interval=REPAIR_AFTER,
    )
    engine.publisher = delivery
    order: list[Any] = []
    worker = Worker(
        engine,
        {"step": lambda ctx: order.append(ctx.payload)},
        delivery=delivery,
        concurrency=2,
        poll_interval=30.0,
        install_signals=False,
        identity=Identity(),
    )
    runner = threading.Thread(target=worker.run)
    try:
        runner.start()
        assert worker.wait_started(10)
        a = engine.submit("step", "A")
        b = engine.submit("step", "B", after=[a.id])
        c = engine.submit("step", "C", after=[b.id])
        # when: the worker runs what it is woken for
        took = wait_until(lambda: engine.get(c.id).state == "succeeded", 20, "C to succeed")
    finally:
        worker.stop()
        runner.join(30)
        engine.store.close()
    # then: in order, each once, well before any repair sweep could have found them
    assert order == ["A", "B", "C"]
    assert took < 20
