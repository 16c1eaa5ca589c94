"""Hostile input at the RabbitMQ boundary, against the real broker: a wake-up that cannot be
published fails alone, every message that is not a wake-up is dead-lettered at once with a
reason, and the dead-letter queue is bounded."""

from __future__ import annotations

import json
import logging
import time

import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import REASON_HEADER, RabbitDelivery
from adapters.rabbitmq.messages import decode
from fsm import Engine, Owner, open_store

from .helpers import (
    delete_broker_names,
    drain_queue,
    raw_channel,
    ready_count,
    stored_job,
    wait_until,
)

OWNER = Owner("test-host", 1, "incarnation-hostile")
LONG_CORRELATION = "c" * 300  # AMQP short strings hold 255 bytes: pika refuses the property


def _wakeups(rabbit_url: str, queue: str) -> dict[str, object]:
    """job id -> correlation_id property of every wake-up now in `queue` (drained); a
    multi-job wake-up carries none."""
    return {
        job_id: props.correlation_id
        for props, body in drain_queue(rabbit_url, queue)
        for job_id in decode(body, limit=2**16)
    }


def test_an_overlong_correlation_id_never_fails_its_batch_and_its_wakeup_goes_without_it(
    rabbit_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a batch of one-job wake-ups (each with its hints as properties) whose middle
    # job holds a correlation id pika cannot put in a property
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, wakeup_ids=1)
    first = stored_job(engine, correlation_id="ok-1")
    bad = stored_job(engine, correlation_id=LONG_CORRELATION)
    last = stored_job(engine, correlation_id="ok-2")
    caplog.set_level(logging.WARNING, logger="adapters.rabbitmq")
    try:
        # when the batch is published twice (e.g. by submit, then by a sweep)
        delivery.publisher.publish([first, bad, last])
        delivery.publisher.publish([bad])
        # then every wake-up went out; the bad one without the property it cannot carry
        got = _wakeups(rabbit_url, f"{prefix}default")
    finally:
        delivery.close()
    assert got == {first.id: "ok-1", bad.id: None, last.id: "ok-2"}
    warnings = [r.getMessage() for r in caplog.records if bad.id in r.getMessage()]
    assert len(warnings) == 1  # logged once, with the reason
    assert "correlation_id is 300 bytes" in warnings[0]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_the_repair_sweep_announces_a_job_with_an_overlong_correlation_id_and_the_rest(
    store: str, rabbit_url: str, prefix: str, sqlite_url: str
) -> None:
    # given two lost wake-ups in a store, the oldest (first in every sweep) holding a bad
    # correlation id (a row written before submit checked them)
    engine = Engine(MemoryStore() if store == "memory" else open_store(sqlite_url))
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, repair_after=0)
    bad = stored_job(engine, correlation_id=LONG_CORRELATION, run_after=engine.clock.now() - 5)
    good = stored_job(engine)
    try:
        # when the repair sweep runs
        republished = delivery.repair(["default"])
        got = _wakeups(rabbit_url, f"{prefix}default")
    finally:
        delivery.close()
        engine.store.close()
    # then it neither fails nor stops at the bad job: both are announced
    assert republished == 2
    assert set(got) == {bad.id, good.id}


def test_an_unpublishable_wakeup_is_skipped_alone_and_the_sweep_moves_past_it(
    rabbit_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a long prefix and a queue name that together exceed AMQP's 255-byte routing key
    long_prefix = f"{prefix}{'p' * 60}."
    long_queue = "q" * 190
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=long_prefix, repair_after=0)
    past = engine.clock.now() - 5
    bad = stored_job(engine, queue=long_queue, run_after=past)
    good = [stored_job(engine, run_after=past + 1), stored_job(engine, run_after=past + 2)]
    caplog.set_level(logging.WARNING, logger="adapters.rabbitmq")
    try:
        # when a batch holding it is published, then two sweeps run over both queues
        delivery.publisher.publish([good[0], bad, good[1]])
        in_batch = _wakeups(rabbit_url, f"{long_prefix}default")
        swept = [delivery.repair(["default", long_queue]) for _ in range(2)]
        assert delivery.publisher.skipped.blocked(bad.id)
    finally:
        delivery.close()
        delete_broker_names(rabbit_url, long_prefix, ("default",))
    # then the rest of the batch went out, the sweeps passed over the bad job without
    # failing, and the skip was logged once with its reason; the job is still queued
    assert set(in_batch) == {g.id for g in good}
    assert swept[0] == 2
    errors = [r.getMessage() for r in caplog.records if bad.id in r.getMessage()]
    assert len(errors) == 1
    assert "routing key" in errors[0]
    assert "over AMQP's 255-byte limit" in errors[0]
    assert engine.get(bad.id).state == "queued"


#: messages that are not wake-ups, and the words their dead-letter reason must hold
POISON = [
    (b"\xff\xfe not UTF-8", "not UTF-8"),
    (b"not json at all", "not JSON"),
    (b'{"job_id": "x", "deep": ' + b"[" * 1500 + b"]" * 1500 + b"}", "nests JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "bytes, over max_message_bytes"),
    (b'["job_id", "x"]', "not an object"),
    (b'{"job_id": 42}', "no valid job_id"),
    (b'{"job_id": "bad\\u0007id"}', "no valid job_id"),
    (b'{"job_id": "x", "fence": "one"}', "field 'fence'"),
    (b'{"job_id": "' + b"y" * 5000 + b'"}', "no valid job_id"),
]


def test_every_poison_message_is_dead_lettered_once_with_a_reason_and_holds_no_slot(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery with two prefetch slots and a 64 KiB message bound
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, prefetch=2)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        # when every kind of poison arrives ahead of a real job
        for body, _ in POISON:
            delivery.publisher.publish_raw("default", body)
        job = engine.submit("noop")
        seen: list[str] = []

        def handle() -> bool:
            for wakeup in delivery.poll(2, 0.2):
                assert wakeup.job_id is not None
                seen.append(wakeup.job_id)
                claimed = engine.claim(OWNER, ["default"], 1, ids=[wakeup.job_id])
                delivery.settle(wakeup, claimed=bool(claimed))
            return job.id in seen

        wait_until(handle, 15, "the real job behind the poison")
        wait_until(
            lambda: ready_count(rabbit_url, f"{prefix}dead-letter") == len(POISON),
            10,
            "every poison message dead-lettered",
        )
        time.sleep(0.5)  # a poison message requeued or dead-lettered twice would show now
        dead = drain_queue(rabbit_url, f"{prefix}dead-letter")
        stats = dict(delivery.consumer.stats)
        assert delivery.ready
    finally:
        delivery.close()
    # then only the job reached the worker; each poison message was dead-lettered exactly
    # once, with its reason, and nothing went back to the work queue
    assert seen == [job.id]
    reasons = sorted(props.headers[REASON_HEADER] for props, _ in dead)
    assert len(reasons) == len(POISON)
    for _, words in POISON:
        assert any(words in r for r in reasons), (words, reasons)
    assert stats["dead_lettered"] == len(POISON)
    assert stats.get("returned", 0) == 0
    assert max(len(body) for _, body in dead) <= 64 * 1024  # the oversized copy is cut
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_the_dead_letter_queue_keeps_the_newest_up_to_its_length_and_drops_old_ones(
    rabbit_url: str, prefix: str
) -> None:
    # given a dead-letter queue bounded to 3 messages of at most 1.5 s
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(
        rabbit_url, engine=engine, prefix=prefix, dead_letter_max_length=3, dead_letter_ttl=1.5
    )
    delivery.start(["default"])
    try:
        # when five poison messages are dead-lettered
        for n in range(5):
            delivery.publisher.publish_raw("default", f"poison {n}".encode())
        wait_until(lambda: not delivery.poll(4, 0.2) and _dead(delivery) == 5, 10, "5 dead")
        # then only the 3 newest are kept, and they expire after the TTL
        wait_until(lambda: ready_count(rabbit_url, f"{prefix}dead-letter") == 3, 5, "3 kept")
        wait_until(lambda: ready_count(rabbit_url, f"{prefix}dead-letter") == 0, 10, "expiry")
    finally:
        delivery.close()


def _dead(delivery: RabbitDelivery) -> int:
    return delivery.consumer.stats["dead_lettered"]


def test_a_dead_letter_queue_left_unbounded_by_an_older_version_is_kept_with_a_warning(
    rabbit_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given a dead-letter queue declared without bounds (as older versions did)
    conn, channel = raw_channel(rabbit_url)
    channel.queue_declare(f"{prefix}dead-letter", durable=True)
    conn.close()
    caplog.set_level(logging.WARNING, logger="adapters.rabbitmq")
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)
    engine.publisher = delivery
    try:
        # when a delivery starts, then it runs (a 406 on the old queue is not fatal) and says so
        delivery.start(["default"])
        job = engine.submit("noop")
        assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
        assert delivery.ready
    finally:
        delivery.close()
    assert any("exists with other arguments" in r.getMessage() for r in caplog.records)


def test_the_unknown_job_check_keeps_only_job_ids_not_message_bodies(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery with the unknown-job check, and a wake-up carrying extra bytes
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)
    delivery.start(["default"])
    try:
        padding = "z" * 4000
        delivery.publisher.publish_raw(
            "default", json.dumps({"job_id": "NO-SUCH-JOB", "kind": padding}).encode()
        )
        # when it is polled (waiting for its check)
        got: list = []
        wait_until(lambda: got.extend(delivery.poll(4, 0.2)) or got, 10, "the wake-up")
        waiting = delivery.held_for_check()
        delivery.settle(got[0])
        queued = delivery.held_for_check()
        wait_until(lambda: delivery.unknown_jobs == 1, 10, "the unknown-job dead letter")
        dead = drain_queue(rabbit_url, f"{prefix}dead-letter")
    finally:
        delivery.close()
    # then only its id waited, and the dead letter names the job without the padding
    assert waiting == ["NO-SUCH-JOB"]
    assert all(padding not in repr(entry) for entry in queued)
    assert [json.loads(body) for _, body in dead] == [{"job_id": "NO-SUCH-JOB"}]
