"""The recovery budget against the real broker: `recovery_attempts` is a maximum, a
recovery announces its budget in one line, a proxy that accepts then closes during a
recovery spends attempts instead of ending the worker, and a silent partition is noticed
by the AMQP heartbeat. Faults are made by a relay the test owns (its connections only)."""

from __future__ import annotations

import logging
import time

import pytest

from adapters.rabbitmq import DeliveryFailed, RabbitDelivery
from adapters.rabbitmq.consumer import recovery_wait
from adapters.rabbitmq.relay import Relay

from .helpers import wait_until

FAST = {"recovery_interval": 0.5, "idle_check": 0.05}
NOBODY = "amqp://guest:guest@127.0.0.1:1/%2F"  # a port nobody listens on


def _consuming(url: str, prefix: str, **options: object) -> RabbitDelivery:
    delivery = RabbitDelivery(url, prefix=prefix, **options)  # type: ignore[arg-type]
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    return delivery


def test_a_proxy_that_accepts_then_closes_during_recovery_spends_attempts_not_the_worker(
    relay: Relay, prefix: str
) -> None:
    # given a consuming delivery behind a proxy, with a budget of 30 attempts
    delivery = _consuming(relay.url, prefix, recovery_attempts=30, **FAST)
    try:
        # when the proxy's backend goes down: connections closed, new ones accepted and
        # closed before any byte (pika: incompatible protocol)
        with relay.backend_down():
            wait_until(
                lambda: delivery.consumer.stats["failure:incompatible-protocol"] >= 2,
                30,
                "two reconnects refused by the proxy",
            )
            # then each is a failed attempt of the budget, not the end of the delivery
            assert delivery.consumer.failure is None
            delivery.check()
            assert relay.rejected >= 2
        # and once the backend is back, consumption resumes
        wait_until(lambda: delivery.ready, 30, "recovery once the backend is back")
        delivery.check()
        assert delivery.consumer.stats["recoveries"] == 1
    finally:
        delivery.close()


def test_a_proxy_that_keeps_closing_spends_the_budget_then_fails_naming_it(
    relay: Relay, prefix: str
) -> None:
    # given a consuming delivery behind a proxy, with a budget of 2 attempts
    delivery = _consuming(relay.url, prefix, recovery_attempts=2, **FAST)
    try:
        # when the proxy's backend stays down
        with relay.backend_down():
            wait_until(lambda: delivery.consumer.failure is not None, 30, "the budget spent")
    finally:
        delivery.close()
    # then the delivery failed once its 2 attempts were spent, naming the last cause
    assert delivery.consumer.stats["recovery_attempts"] == 2
    with pytest.raises(DeliveryFailed, match=r"budget spent: 2 attempts.*incompatible-protocol"):
        delivery.check()


def test_a_proxy_that_closes_the_very_first_connection_is_fatal_at_once(
    relay: Relay, prefix: str
) -> None:
    # given a proxy whose backend is down before the delivery ever connected
    with relay.backend_down():
        delivery = RabbitDelivery(relay.url, prefix=prefix, **FAST)
        # when it starts, then nothing proves the URL speaks AMQP: fatal, no attempt spent
        with pytest.raises(DeliveryFailed, match=r"unrecoverable.*incompatible-protocol"):
            delivery.start(["default"])
        delivery.close()
    assert delivery.consumer.stats["recovery_attempts"] == 0


def test_recovery_attempts_is_a_maximum_not_a_minimum(prefix: str) -> None:
    # given 3 attempts with a 60 s interval (earlier, attempts went on for 2 x 60 s)
    delivery = RabbitDelivery(NOBODY, prefix=prefix, recovery_attempts=3, recovery_interval=60.0)
    try:
        # when the broker cannot be reached
        delivery.start(["default"])
        # then the delivery fails after exactly 3 attempts, waiting only the backoff
        # (1 s, then 1.5 s, each jittered), not the interval times the attempts
        wait_until(lambda: delivery.consumer.failure is not None, 20, "the budget spent")
    finally:
        delivery.close()
    assert delivery.consumer.stats["recovery_attempts"] == 3
    assert delivery.consumer.stats["failure:connection-lost"] == 4  # start + 3 attempts
    with pytest.raises(DeliveryFailed, match=r"budget spent: 3 attempts"):
        delivery.check()


def test_the_longest_wait_of_a_budget_is_the_sum_of_its_capped_backoff() -> None:
    # the first attempt is immediate, then 1 s, 1.5 s, 2.25 s, ... capped at the interval
    assert recovery_wait(0, 60.0) == 0.0
    assert recovery_wait(1, 60.0) == 0.0
    assert recovery_wait(3, 60.0) == pytest.approx(1.0 + 1.5)
    assert recovery_wait(4, 2.0) == pytest.approx(1.0 + 1.5 + 2.0)
    # the defaults: 15 attempts, interval 60 s
    assert recovery_wait(15, 60.0) == pytest.approx(351.0, abs=0.1)


def test_a_broker_unreachable_at_start_logs_one_line_naming_the_budget(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a broker that cannot be reached, and a budget of 3 attempts
    caplog.set_level(logging.WARNING, logger="adapters.rabbitmq")
    delivery = RabbitDelivery(NOBODY, prefix=prefix, recovery_attempts=3, recovery_interval=0.2)
    try:
        # when the delivery starts, it returns (the worker starts, not ready)
        delivery.start(["default"])
        assert not delivery.ready
        wait_until(lambda: delivery.consumer.failure is not None, 20, "the budget spent")
    finally:
        delivery.close()
    # then one line, at start, named the budget in attempts and time, whatever the attempts
    lines = [r.getMessage() for r in caplog.records if "not reachable at start" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "at most 3 attempt(s) within 0 s of waits" in lines[0]
    assert "recovery_attempts=3, recovery_interval=0.2 s" in lines[0]
    assert "guest:guest" not in lines[0]


def test_a_lost_connection_logs_one_line_naming_the_budget(
    relay: Relay, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a consuming delivery with 30 attempts
    caplog.set_level(logging.WARNING, logger="adapters.rabbitmq")
    delivery = _consuming(relay.url, prefix, recovery_attempts=30, **FAST)
    try:
        # when its broker is down for a few attempts, then back
        with relay.outage():
            wait_until(lambda: delivery.consumer.stats["recovery_attempts"] >= 2, 30, "attempts")
        wait_until(lambda: delivery.ready, 30, "recovery")
    finally:
        delivery.close()
    # then the recovery was announced once, with its budget
    lines = [r.getMessage() for r in caplog.records if "reconnecting with" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "at most 30 attempt(s)" in lines[0]


def test_a_silent_partition_is_noticed_by_the_heartbeat_and_recovered(
    relay: Relay, prefix: str
) -> None:
    # given a consuming delivery with a 1 s heartbeat, behind a relay
    delivery = _consuming(relay.url, prefix, heartbeat=1, recovery_attempts=60, **FAST)
    try:
        # when the network goes silent (nothing forwarded, nothing closed)
        with relay.partition():
            started = time.monotonic()
            wait_until(
                lambda: delivery.consumer.stats["failure:stream-lost"] >= 1,
                60,
                "the heartbeat to notice the partition",
            )
            noticed = time.monotonic() - started
            # then the consumer noticed it is cut off and is not ready
            assert not delivery.ready
        # and once the partition heals it consumes again
        wait_until(lambda: delivery.ready, 60, "recovery after the partition")
        delivery.check()
        print(f"partition noticed after {noticed:.1f} s with heartbeat=1")
    finally:
        delivery.close()
