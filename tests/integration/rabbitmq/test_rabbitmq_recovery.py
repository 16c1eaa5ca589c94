"""Failure detection and recovery against the real broker: forced closures, consumer
timeouts, a broker outage, missing queues, bad credentials, stale delivery tags.

The broker is shared: closures and outages are made by a relay the test owns, on the
test's own connections (`relay.force_close()` sends what an operator's close sends;
`relay.outage()` refuses connections as a stopped broker does)."""

from __future__ import annotations

import logging
import math
import random
import socket
import time

import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import DeliveryFailed, RabbitConfig, RabbitDelivery
from adapters.rabbitmq.consumer import Consumer, recovery_delay
from adapters.rabbitmq.relay import Relay
from fsm import Engine
from fsm.errors import BadInput
from fsm.telemetry.metrics import MetricsBase

from .helpers import (
    DriverLoop,
    consumer_timeout,
    raw_channel,
    ready_count,
    wait_until,
)

FAST = {"recovery_interval": 0.5, "idle_check": 0.05}


@pytest.mark.broker_settings
def test_long_job_outlives_a_lowered_consumer_timeout_without_any_channel_closure(
    rabbit_url: str, prefix: str
) -> None:
    # given a broker whose consumer timeout is 1 s, checked every 0.5 s
    engine = Engine(MemoryStore())
    with consumer_timeout(1000):
        delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, **FAST)
        engine.publisher = delivery
        loop = DriverLoop(engine, delivery, handler=lambda job: time.sleep(4.0)).start()
        try:
            # when a job runs four times longer than the consumer timeout
            job = engine.submit("slow")
            wait_until(lambda: engine.get(job.id).state == "succeeded", 20, "the long job")
            generation = delivery.consumer.generation
            stats = dict(delivery.consumer.stats)
        finally:
            loop.stop()
            delivery.close()
    # then the delivery was acked at lease time: the channel was never closed
    assert loop.error is None
    assert generation == 1
    assert not [k for k in stats if k.startswith("failure:")]


@pytest.mark.broker_settings
def test_held_acks_past_the_consumer_timeout_are_classified_as_ack_timeout_with_queue_names(
    rabbit_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given early acks disabled (test-only) and a 1 s consumer timeout
    engine = Engine(MemoryStore())
    caplog.set_level(logging.ERROR, logger="adapters.rabbitmq")
    with consumer_timeout(1000):
        delivery = RabbitDelivery(
            rabbit_url, engine=engine, prefix=prefix, ack_on_settle=False, **FAST
        )
        engine.publisher = delivery
        loop = DriverLoop(engine, delivery, handler=lambda job: time.sleep(3.0)).start()
        try:
            # when a job holds its delivery unacked for longer than the timeout
            engine.submit("slow")
            wait_until(
                lambda: delivery.consumer.stats["failure:ack-timeout"] >= 1, 20, "an ACK timeout"
            )
            wait_until(lambda: delivery.ready, 10, "recovery after the ACK timeout")
        finally:
            loop.stop()
            delivery.close()
    # then the closure was logged as an ACK timeout naming the queue, and recovered from
    messages = [r.getMessage() for r in caplog.records if "ACK timeout" in r.getMessage()]
    assert messages
    assert f"{prefix}default" in messages[0]
    assert delivery.consumer.stats["recoveries"] >= 1


def test_broker_stopped_longer_than_the_budget_fails_within_attempts_times_interval(
    relay: Relay, prefix: str, memory_engine: Engine
) -> None:
    # given a consuming delivery with 2 recovery attempts 1 s apart
    delivery = RabbitDelivery(
        relay.url, prefix=prefix, recovery_attempts=2, recovery_interval=1.0, idle_check=0.05
    )
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    try:
        with relay.outage():
            # when the broker stays down
            stopped = time.monotonic()
            failed_after = wait_until(lambda: delivery.consumer.failure is not None, 30, "failure")
            elapsed = time.monotonic() - stopped + failed_after
            # then the delivery gives up loudly within 2 x 1 s plus a bound, and is not ready
            assert elapsed < 2 * 1.0 + 10.0
            assert not delivery.ready
            with pytest.raises(DeliveryFailed, match=r"recovery budget spent: \d+ attempts"):
                delivery.check()
            with pytest.raises(DeliveryFailed):
                delivery.poll(4, 0.1)
    finally:
        delivery.close()


def test_broker_restarted_within_the_budget_resumes_consumption_and_readiness(
    relay: Relay, prefix: str
) -> None:
    # given a consuming delivery with 30 attempts 1 s apart
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(
        relay.url, engine=engine, prefix=prefix, recovery_attempts=30, recovery_interval=1.0
    )
    engine.publisher = delivery
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    try:
        # when the broker stops and comes back
        with relay.outage() as start_again:
            wait_until(lambda: not delivery.ready, 30, "readiness to drop")
            start_again()
        wait_until(lambda: delivery.ready, 60, "readiness to return")
        # then consumption resumes
        job = engine.submit("noop")
        got: list[str] = []
        wait_until(
            lambda: got.extend(w.job_id for w in delivery.poll(4, 0.2) if w.job_id) or got,
            10,
            "a wake-up after the restart",
        )
        assert got == [job.id]
        delivery.check()
        assert delivery.consumer.stats["recoveries"] == 1
    finally:
        delivery.close()


def test_missing_queue_with_passive_declare_fails_at_once_without_retrying(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery that must not declare, and no work queue on the broker
    conn, channel = raw_channel(rabbit_url)
    channel.exchange_declare(f"{prefix}dead-letter", exchange_type="fanout", durable=True)
    channel.queue_declare(f"{prefix}dead-letter", durable=True)
    conn.close()
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, declare=False)
    # when it starts
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match=rf"not-found.*{prefix}default"):
        delivery.start(["default"])
    # then it failed at once, without any recovery attempt, and stays failed
    assert time.monotonic() - started < 5.0
    assert delivery.consumer.stats["recovery_attempts"] == 0
    with pytest.raises(DeliveryFailed):
        delivery.check()
    assert not delivery.ready
    delivery.close()


def test_bad_password_fails_at_once_with_a_clear_error(rabbit_url: str, prefix: str) -> None:
    # given a delivery with a wrong password
    delivery = RabbitDelivery(rabbit_url.replace("guest:guest", "guest:wrong"), prefix=prefix)
    # when it starts, then it fails at once naming the cause, without retrying
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match="auth"):
        delivery.start(["default"])
    assert time.monotonic() - started < 10.0
    assert delivery.consumer.stats["recovery_attempts"] == 0
    delivery.close()


def test_stale_delivery_tag_from_before_a_reconnect_is_never_acked_on_the_new_channel(
    rabbit_url: str, relay: Relay, prefix: str
) -> None:
    # given two wake-ups on channel generation 1, one job per message (wakeup_ids=1:
    # tags are what this is about); the first settled, the second (tag 2) not
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, wakeup_ids=1, **FAST)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        first, second = engine.submit("noop"), engine.submit("noop")
        old: list = []
        wait_until(lambda: old.extend(delivery.poll(4, 0.2)) or len(old) == 2, 10, "two wake-ups")
        assert {w.job_id for w in old} == {first.id, second.id}
        acked = delivery.consumer.stats["acked"]
        delivery.settle(old[0])
        # (acks go out in batches on the connection's thread: wait until it went)
        wait_until(lambda: delivery.consumer.stats["acked"] > acked, 10, "the first ack")
        time.sleep(0.2)
        # when the broker force-closes the connection and the consumer reconnects
        assert relay.force_close() >= 1
        wait_until(lambda: delivery.ready and delivery.consumer.generation == 2, 30, "recovery")
        redelivered: list = []
        wait_until(
            lambda: redelivered.extend(delivery.poll(4, 0.2)) or redelivered, 10, "redelivery"
        )
        # and the old wake-up is settled late
        delivery.settle(old[1])
        time.sleep(0.5)
        # then its tag was dropped (tag 2 does not exist on the new channel: acking it there
        # would close the channel with "unknown delivery tag"), and the channel lives on
        assert delivery.consumer.stats["stale_tags"] == 1
        assert delivery.consumer.generation == 2
        assert delivery.ready
        assert [w.job_id for w in redelivered] == [old[1].job_id]
        delivery.settle(redelivered[0])
        time.sleep(0.2)
    finally:
        delivery.close()
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_consumer_cancelled_by_the_broker_is_detected_and_recovered(
    rabbit_url: str, prefix: str
) -> None:
    # given a consuming delivery
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, **FAST)
    engine.publisher = delivery
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    try:
        # when its queue is deleted under it (the broker cancels the consumer)
        conn, channel = raw_channel(rabbit_url)
        channel.queue_delete(f"{prefix}default")
        conn.close()
        wait_until(lambda: delivery.consumer.stats["recoveries"] == 1, 10, "recovery")
        # then the cancellation was seen, the queue redeclared, and consumption goes on
        assert delivery.consumer.stats["failure:consumer-cancelled"] == 1
        job = engine.submit("noop")
        got: list[str] = []
        wait_until(
            lambda: got.extend(w.job_id for w in delivery.poll(4, 0.2) if w.job_id) or got,
            10,
            "a wake-up after the cancel",
        )
        assert got == [job.id]
    finally:
        delivery.close()


def test_buffered_delivery_held_past_max_hold_is_returned_to_the_broker(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery whose worker has no free slot for a while
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(
        rabbit_url, engine=engine, prefix=prefix, prefetch=4, max_hold=0.3, **FAST
    )
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        job = engine.submit("noop")
        # when nobody polls for longer than max_hold
        wait_until(lambda: delivery.consumer.stats["returned"] >= 1, 10, "the hold bound")
        # then the buffered delivery went back to the broker, and comes again when polled
        assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
    finally:
        delivery.close()


def test_close_interrupts_the_wait_between_recovery_attempts(prefix: str) -> None:
    # given a delivery pointed at a port nobody listens on, with a 60 s interval
    delivery = RabbitDelivery(
        "amqp://guest:guest@127.0.0.1:1/%2F", prefix=prefix, recovery_interval=60.0
    )
    delivery.start(["default"])
    wait_until(lambda: delivery.consumer.stats["recovery_attempts"] == 1, 10, "first attempt")
    # when it is closed during the wait
    started = time.monotonic()
    delivery.close()
    # then close returns at once, and the delivery never became ready
    assert time.monotonic() - started < 2.0
    assert not delivery.ready


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("recovery_attempts", True),
        ("recovery_attempts", -1),
        ("recovery_attempts", 1.5),
        ("recovery_attempts", 10**9),
        ("recovery_interval", False),
        ("recovery_interval", -0.1),
        ("recovery_interval", math.inf),
        ("recovery_interval", math.nan),
        ("recovery_interval", 1e12),
        ("prefetch", 0),
        ("prefetch", 70_000),
        ("max_hold", 0),
        ("max_hold", math.inf),
        ("idle_check", math.nan),
        ("connect_timeout", math.inf),
        ("heartbeat", 0),
        ("heartbeat", 70_000),
        ("repair_interval", -math.inf),
        ("dead_letter_ttl", 0),
        ("dead_letter_max_length", 0),
        ("publish_batch", 0),
        ("queue_type", "stream"),
    ],
)
def test_bad_options_are_refused_with_bad_input_naming_the_option(
    option: str, value: object
) -> None:
    with pytest.raises(BadInput, match=option):
        RabbitConfig(**{option: value})  # type: ignore[arg-type]


def test_recovery_attempts_zero_disables_recovery(prefix: str) -> None:
    # given recovery disabled, pointed at a port nobody listens on
    delivery = RabbitDelivery(
        "amqp://guest:guest@127.0.0.1:1/%2F", prefix=prefix, recovery_attempts=0
    )
    # when it starts, then the first lost connection is final
    with pytest.raises(DeliveryFailed, match="recovery is disabled"):
        delivery.start(["default"])
    assert delivery.consumer.stats["recovery_attempts"] == 0
    with pytest.raises(DeliveryFailed, match="recovery is disabled"):
        delivery.check()
    delivery.close()


def test_recovery_budget_is_reset_once_every_subscription_is_restored(
    relay: Relay, prefix: str
) -> None:
    # given a budget of a single recovery attempt
    delivery = RabbitDelivery(relay.url, prefix=prefix, recovery_attempts=1, **FAST)
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    try:
        # when the broker force-closes the connection three times, each after a full recovery
        for generation in (2, 3, 4):
            assert relay.force_close() >= 1
            wait_until(
                lambda g=generation: delivery.ready and delivery.consumer.generation == g,
                30,
                f"recovery to generation {generation}",
            )
        # then each loss found a fresh budget: still healthy
        delivery.check()
        assert delivery.consumer.stats["recoveries"] == 3
        assert delivery.consumer.stats["failure:closed-320"] == 3
    finally:
        delivery.close()


def test_a_handshake_timeout_is_transient_and_retried_until_the_budget_is_spent(
    prefix: str,
) -> None:
    # given a TCP port that accepts connections but never speaks AMQP back
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    delivery = RabbitDelivery(
        f"amqp://guest:guest@127.0.0.1:{port}/%2F",
        prefix=prefix,
        connect_timeout=0.3,
        recovery_attempts=3,
        recovery_interval=0.2,
    )
    try:
        # when the delivery starts, then the first timeout does not end it at once
        delivery.start(["default"])
        wait_until(lambda: delivery.consumer.failure is not None, 20, "the budget to be spent")
    finally:
        delivery.close()
        silent.close()
    # and it gave up only once its attempts were spent, naming the cause
    assert delivery.consumer.stats["recovery_attempts"] >= 3
    assert delivery.consumer.stats["failure:handshake-timeout"] >= 4
    with pytest.raises(DeliveryFailed, match=r"budget spent.*handshake-timeout"):
        delivery.check()


def test_a_dns_failure_is_transient_and_retried_until_the_budget_is_spent(prefix: str) -> None:
    # given a broker host name that does not resolve
    delivery = RabbitDelivery(
        "amqp://guest:guest@no-such-broker.invalid:5672/%2F",
        prefix=prefix,
        recovery_attempts=2,
        recovery_interval=0.2,
    )
    try:
        # when the delivery starts, then it retries within its budget, then fails naming DNS
        delivery.start(["default"])
        wait_until(lambda: delivery.consumer.failure is not None, 20, "the budget to be spent")
    finally:
        delivery.close()
    assert delivery.consumer.stats["recovery_attempts"] >= 2
    with pytest.raises(DeliveryFailed, match=r"budget spent.*\(dns\)"):
        delivery.check()


def test_a_url_pointing_at_another_service_fails_at_once_as_incompatible(prefix: str) -> None:
    # given a URL pointing at PostgreSQL's port instead of RabbitMQ's
    delivery = RabbitDelivery("amqp://guest:guest@127.0.0.1:5432/%2F", prefix=prefix)
    # when it starts, then it fails at once, without any recovery attempt
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match="incompatible-protocol"):
        delivery.start(["default"])
    assert time.monotonic() - started < 5.0
    assert delivery.consumer.stats["recovery_attempts"] == 0
    assert not delivery.ready
    delivery.close()


def test_an_io_thread_that_dies_on_a_bug_flags_the_delivery_and_the_worker(
    prefix: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # given a bug in the failure handling of the I/O thread, and a lost connection
    def bug(self: Consumer, verdict: object) -> None:
        raise RuntimeError("a bug in failure handling")

    monkeypatch.setattr(Consumer, "_log_failure", bug)
    caplog.set_level(logging.ERROR, logger="adapters.rabbitmq")
    delivery = RabbitDelivery(
        "amqp://guest:guest@127.0.0.1:1/%2F", prefix=prefix, connect_timeout=0.5
    )
    # when the delivery starts, then it fails at once instead of staying alive doing nothing
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match="I/O thread stopped on an unexpected error"):
        delivery.start(["default"])
    assert time.monotonic() - started < 2.0
    assert not delivery.ready
    with pytest.raises(DeliveryFailed, match="RuntimeError: a bug in failure handling"):
        delivery.check()
    assert any("I/O thread" in r.getMessage() for r in caplog.records)
    delivery.close()


def test_an_io_thread_that_ends_without_a_stop_request_flags_the_delivery(
    rabbit_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an I/O thread whose loop returns although nobody asked it to stop
    monkeypatch.setattr(Consumer, "_loop", lambda self: None)
    delivery = RabbitDelivery(rabbit_url, prefix=prefix)
    # when the delivery starts, then the ended thread is seen: not ready, check() raises
    with pytest.raises(DeliveryFailed, match="I/O thread ended although nobody stopped it"):
        delivery.start(["default"])
    assert not delivery.ready
    with pytest.raises(DeliveryFailed):
        delivery.check()
    delivery.close()


def test_recovery_waits_grow_from_about_one_second_to_the_interval_with_jitter() -> None:
    rng = random.Random(7)
    waits = [recovery_delay(n, 60.0, rng) for n in range(1, 30)]
    # the first attempt is immediate; then from 0.5-1 s, growing, capped at the interval
    assert waits[0] == 0.0
    assert 0.5 <= waits[1] <= 1.0
    assert all(w <= 60.0 for w in waits)
    assert max(waits[-5:]) >= 30.0
    # jittered: two workers do not share one schedule
    other = [recovery_delay(n, 60.0, random.Random(8)) for n in range(1, 30)]
    assert waits[1:] != other[1:]
    # an interval under 1 s caps every wait
    assert all(recovery_delay(n, 0.2, rng) <= 0.2 for n in range(1, 10))


def test_consumption_resumes_within_seconds_of_the_broker_returning(
    relay: Relay, prefix: str
) -> None:
    # given a consuming delivery with the default recovery budget (5 x 60 s)
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix)
    engine.publisher = delivery
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    wait_until(lambda: delivery.ready, 10, "readiness")
    try:
        # when the broker stops for 10 s and comes back
        with relay.outage() as start_again:
            stopped = time.monotonic()
            wait_until(lambda: not delivery.ready, 30, "readiness to drop")
            time.sleep(max(0.0, 10.0 - (time.monotonic() - stopped)))
            start_again()
            back = time.monotonic()
        resumed_after = wait_until(lambda: delivery.ready, 60, "readiness to return")
        print(
            f"broker down {back - stopped:.1f} s (the relay's outage); "
            f"consumer ready {resumed_after:.1f} s after the broker was back"
        )
        # then the consumer is back within a few seconds, not after the full interval
        assert resumed_after < 15.0
        job = engine.submit("noop")
        got: list[str] = []
        wait_until(
            lambda: got.extend(w.job_id for w in delivery.poll(4, 0.2) if w.job_id) or got,
            10,
            "a wake-up after the restart",
        )
        assert got == [job.id]
    finally:
        delivery.close()


def test_a_reconnect_is_counted_as_a_delivery_recovery_in_the_engines_metrics(
    relay: Relay, prefix: str
) -> None:
    # given a delivery whose engine counts delivery recoveries
    class Recoveries(MetricsBase):
        def __init__(self) -> None:
            self.seen: list[tuple[str, str]] = []

        def delivery_recovery(self, delivery: str, reason: str) -> None:
            self.seen.append((delivery, reason))

    metrics = Recoveries()
    engine = Engine(MemoryStore(), metrics=metrics)
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, **FAST)
    delivery.start(["default"])
    try:
        wait_until(lambda: delivery.poll(1, 0.1) == [] and delivery.ready, 10, "connected")
        # when the broker closes the delivery's connections and the consumer reconnects
        assert relay.force_close() >= 1
        wait_until(
            lambda: delivery.poll(1, 0.1) == [] and delivery.consumer.generation == 2,
            30,
            "recovery",
        )
        # then the recovery was reported once, with its reason
        wait_until(lambda: metrics.seen, 5, "the metric")
        assert [d for d, _ in metrics.seen] == ["rabbitmq"]
        assert "reconnected after" in metrics.seen[0][1]
    finally:
        delivery.close()
