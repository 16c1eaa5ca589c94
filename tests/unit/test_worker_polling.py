"""PollingDelivery without store notifications (memory store)."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.memory import MemoryStore
from adapters.polling import PollingDelivery
from fsm import Engine


def test_poll_returns_a_claim_any_wakeup_after_at_most_the_timeout() -> None:
    delivery = PollingDelivery(MemoryStore(), poll_interval=5.0)
    delivery.start(["default"])

    began = time.monotonic()
    wakeups = delivery.poll(4, 0.2)

    assert 0.15 <= time.monotonic() - began < 1.0
    assert [w.job_id for w in wakeups] == [None]


def test_the_poll_interval_caps_the_wait() -> None:
    delivery = PollingDelivery(MemoryStore(), poll_interval=0.1)

    began = time.monotonic()
    delivery.poll(1, 30.0)

    assert time.monotonic() - began < 1.0


def test_a_local_publish_on_a_served_queue_wakes_the_poll_early() -> None:
    store = MemoryStore()
    delivery = PollingDelivery(store, poll_interval=30.0)
    delivery.start(["mail"])
    engine = Engine(store, publisher=delivery)
    threading.Timer(0.1, lambda: engine.submit("k", queue="other")).start()
    threading.Timer(0.3, lambda: engine.submit("k", queue="mail")).start()

    began = time.monotonic()
    delivery.poll(1, 30.0)

    assert 0.25 <= time.monotonic() - began < 2.0


def test_no_capacity_means_no_wakeup() -> None:
    assert PollingDelivery(MemoryStore()).poll(0, 0.0) == []


@pytest.mark.parametrize("bad", [0.0, 0.001, 61.0])
def test_a_poll_interval_out_of_bounds_is_refused_naming_the_bounds(bad: float) -> None:
    with pytest.raises(ValueError, match="poll_interval must be between"):
        PollingDelivery(MemoryStore(), poll_interval=bad)
