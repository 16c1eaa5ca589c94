"""PollingDelivery over PostgreSQL LISTEN/NOTIFY."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from adapters.polling import PollingDelivery
from fsm import Engine


def test_a_submit_from_another_process_wakes_the_poll_through_notify(
    pg_url: str, open_engine: Callable[[str], Engine]
) -> None:
    listener = open_engine(pg_url)
    submitter = open_engine(pg_url)  # its own store: the notification crosses connections
    delivery = PollingDelivery(listener.store, poll_interval=30.0)
    delivery.start(["default"])
    delivery.poll(1, 0.2)  # the LISTEN is set up
    threading.Timer(0.3, lambda: submitter.submit("noop")).start()

    began = time.monotonic()
    delivery.poll(1, 30.0)

    assert 0.25 <= time.monotonic() - began < 3.0


def test_wake_interrupts_a_wait_on_store_notifications(
    pg_url: str, open_engine: Callable[[str], Engine]
) -> None:
    engine = open_engine(pg_url)
    delivery = PollingDelivery(engine.store, poll_interval=30.0)
    delivery.start(["default"])
    threading.Timer(0.3, delivery.wake).start()

    began = time.monotonic()
    delivery.poll(1, 30.0)

    assert time.monotonic() - began < 2.0
