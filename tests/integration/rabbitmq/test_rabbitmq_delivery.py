"""RabbitDelivery against the real broker: wake-ups, acks after lease, dead letters,
mandatory publishing, repair sweeps and stale delivery tags."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import REASON_HEADER, PublishFailed, RabbitDelivery
from adapters.rabbitmq.messages import decode
from fsm import Engine, Owner
from fsm.service.maintenance import sweep

from .helpers import DriverLoop, drain_queue, raw_channel, ready_count, wait_until

OWNER = Owner("test-host", 1, "incarnation-1")


def test_submitted_job_is_woken_claimed_and_acked_after_the_lease(
    rabbit_url: str, prefix: str
) -> None:
    # given a worker-side delivery and an engine that publishes through it
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        # when a job is submitted and its wake-up polled
        job = engine.submit("noop", {"n": 1})
        wakeups = delivery.poll(4, 5.0)
        # then the wake-up names the job; once leased and settled, the message is acked
        assert [w.job_id for w in wakeups] == [job.id]
        (leased,) = engine.claim(OWNER, ["default"], 1, ids=[job.id])
        delivery.settle(wakeups[0])
        assert leased.state == "leased"
        assert delivery.ready
    finally:
        delivery.close()
    assert ready_count(rabbit_url, f"{prefix}default") == 0  # acked, so not requeued on close


def test_unsettled_wakeup_is_not_acked_and_returns_to_the_queue(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery that handed out a wake-up
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix)
    engine.publisher = delivery
    delivery.start(["default"])
    job = engine.submit("noop")
    assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
    # when the worker goes away without settling it
    delivery.close()
    # then the broker still has the message: nothing was acked before the lease
    assert ready_count(rabbit_url, f"{prefix}default") == 1


def test_message_carries_only_json_hints_and_is_persistent(rabbit_url: str, prefix: str) -> None:
    # given a publisher-only delivery
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix)
    engine.publisher = delivery
    try:
        # when a job is submitted
        job = engine.submit("email", {"to": "someone"}, correlation_id="corr-7")
        assert delivery.flush(10)
        # then the broker holds one persistent JSON message with the hints, no payload
        ((props, body),) = drain_queue(rabbit_url, f"{prefix}default")
        assert json.loads(body) == {
            "job_id": job.id,
            "kind": "email",
            "fence": 0,
            "version": 1,
            "correlation_id": "corr-7",
        }
        assert props.delivery_mode == 2
        assert props.content_type == "application/json"
    finally:
        delivery.close()


def test_unroutable_publish_raises_and_the_job_stays_queued(rabbit_url: str, prefix: str) -> None:
    # given a delivery that must not declare queues, and no queue on the broker
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, declare=False)
    conn, channel = raw_channel(rabbit_url)  # the dead-letter pair exists, the work queue not
    channel.exchange_declare(f"{prefix}dead-letter", exchange_type="fanout", durable=True)
    channel.queue_declare(f"{prefix}dead-letter", durable=True)
    conn.close()
    engine = Engine(MemoryStore())
    job = engine.submit("noop")
    # when its wake-up is published
    with pytest.raises(PublishFailed, match=r"not-found|unroutable|does not exist"):
        delivery.publish([job], wait=True)
    # then the job is untouched in the store
    assert engine.get(job.id).state == "queued"
    delivery.close()


def test_engine_submit_survives_a_failed_publish(rabbit_url: str, prefix: str) -> None:
    # given an engine whose publisher points at a broker with a wrong password
    bad = rabbit_url.replace("guest:guest", "guest:wrong")
    delivery = RabbitDelivery(bad, prefix=prefix, publish_retries=0)
    engine = Engine(MemoryStore(), publisher=delivery)
    # when a job is submitted
    job = engine.submit("noop")
    # then it is committed and queued: the lost wake-up is for the repair sweep
    assert engine.get(job.id).state == "queued"
    delivery.close()


def test_poison_messages_are_dead_lettered_with_reason_and_consumption_continues(
    rabbit_url: str, prefix: str
) -> None:
    # given a consuming delivery with an engine (so unknown jobs can be recognised)
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        # when garbage, a message without job id, one naming an unknown job, then a job arrive
        delivery.publisher.publish_raw("default", b"\xff not json")
        delivery.publisher.publish_raw("default", b'{"kind": "x"}')
        delivery.publisher.publish_raw("default", b'{"job_id": "NO-SUCH-JOB"}')
        job = engine.submit("noop")
        seen: list[str] = []

        def handle() -> bool:
            for wakeup in delivery.poll(8, 0.2):
                assert wakeup.job_id is not None
                seen.append(wakeup.job_id)
                engine.claim(OWNER, ["default"], 1, ids=[wakeup.job_id])
                delivery.settle(wakeup)
            return len(seen) == 2

        wait_until(handle, 10, "two wake-ups")
        # then garbage never reaches the worker; the unknown job's wake-up is settled (nothing
        # to claim) and dead-lettered after; the real job is leased
        assert seen == ["NO-SUCH-JOB", job.id]
        assert engine.get(job.id).state == "leased"
        wait_until(
            lambda: ready_count(rabbit_url, f"{prefix}dead-letter") == 3, 10, "three dead letters"
        )
        dead = drain_queue(rabbit_url, f"{prefix}dead-letter")
        reasons = [props.headers[REASON_HEADER] for props, _ in dead]
        assert len(reasons) == 3
        assert any("not UTF-8" in r for r in reasons)
        assert any("no valid job_id" in r for r in reasons)
        assert "unknown job 'NO-SUCH-JOB'" in reasons
        assert delivery.ready
    finally:
        delivery.close()
    assert ready_count(rabbit_url, f"{prefix}default") == 0  # all settled: nothing requeued


def test_duplicate_wakeups_for_a_leased_job_are_acked_and_dropped(
    rabbit_url: str, prefix: str, memory_engine: Engine
) -> None:
    # given a job whose wake-up was published three times (three calls: one call names a
    # job once, whatever its list repeats)
    delivery = RabbitDelivery(rabbit_url, engine=memory_engine, prefix=prefix)
    job = memory_engine.submit("noop")
    for _ in range(3):
        delivery.publish([job], wait=True)
    loop = DriverLoop(memory_engine, delivery).start()
    try:
        # when the loop handles them
        wait_until(lambda: memory_engine.get(job.id).state == "succeeded", 10, "success")
        wait_until(lambda: loop.not_claimable == 2, 10, "both duplicates handled")
        # then the job ran once and both duplicates were acked without a claim
        assert loop.effects.committed == {job.id: [1]}
        assert loop.not_claimable == 2
    finally:
        loop.stop()
        delivery.close()
    assert loop.error is None
    assert ready_count(rabbit_url, f"{prefix}default") == 0  # all three acked


def test_repair_sweep_republishes_a_lost_wakeup_after_the_bound(
    rabbit_url: str, prefix: str, memory_engine: Engine
) -> None:
    # given a job committed without a wake-up (publish lost) and a delivery with a 1 s bound
    job = memory_engine.submit("noop")
    delivery = RabbitDelivery(
        rabbit_url, engine=memory_engine, prefix=prefix, repair_after=1.0, repair_interval=60
    )
    delivery.start(["default"])
    try:
        # when a sweep runs before the bound, then after it
        before = delivery.repair()
        time.sleep(1.1)
        after = delivery.repair()
        # then only the second republishes, and the job's wake-up arrives
        assert (before, after) == (0, 1)
        assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
    finally:
        delivery.close()


def test_repair_sweep_republishes_only_the_deficit_over_wakeups_still_in_the_broker(
    rabbit_url: str, prefix: str, memory_engine: Engine
) -> None:
    # given three stale queued jobs whose wake-ups (one message per job) still sit in the broker
    delivery = RabbitDelivery(
        rabbit_url, engine=memory_engine, prefix=prefix, repair_after=0.0, wakeup_ids=1
    )
    memory_engine.publisher = delivery
    jobs = [memory_engine.submit("noop") for _ in range(3)]
    assert delivery.flush(10)
    # when a sweep runs, then a fourth job loses its wake-up and a sweep runs again
    first = delivery.repair(["default"])
    memory_engine.publisher = None
    memory_engine.submit("noop")
    second = delivery.repair(["default"])
    # then nothing is republished while wake-ups cover the jobs; then exactly the deficit,
    # oldest stale job first (which wake-up was lost is unknown; duplicates are harmless)
    assert (first, second) == (0, 1)
    bodies = [json.loads(b)["job_id"] for _, b in drain_queue(rabbit_url, f"{prefix}default")]
    assert sorted(bodies[:3]) == sorted(j.id for j in jobs)  # the sender threads may reorder
    # oldest is by (run_after, id): ids made within one millisecond are in random order
    assert bodies[3] == min(jobs, key=lambda j: (j.run_after, j.id)).id
    delivery.close()


def test_repair_sweep_wakes_a_job_whose_lease_expired_without_waiting_for_the_bound(
    rabbit_url: str, prefix: str
) -> None:
    # given a job leased by a worker that died: its lease lapsed and recovery requeued it
    from fsm import FakeClock

    clock = FakeClock(time.time())
    engine = Engine(MemoryStore(), clock=clock)
    job = engine.submit("noop")
    engine.claim(OWNER, ["default"], 1)
    clock.advance(engine.policy.lease.ttl + 1)
    sweep(engine)
    assert engine.get(job.id).state == "queued"
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, repair_after=3600.0)
    # when a sweep runs (long before `repair_after` would pass)
    republished = delivery.repair(["default"])
    # then the requeued job gets a wake-up at once: nothing announced it since the lease
    assert republished == 1
    assert [json.loads(b)["job_id"] for _, b in drain_queue(rabbit_url, f"{prefix}default")] == [
        job.id
    ]
    delivery.close()


def test_failed_asynchronous_publish_is_republished_by_the_next_sweep_at_once(
    rabbit_url: str, prefix: str, memory_engine: Engine
) -> None:
    # given a publisher that may not declare queues, and no work queue yet
    conn, channel = raw_channel(rabbit_url)
    channel.exchange_declare(f"{prefix}dead-letter", exchange_type="fanout", durable=True)
    channel.queue_declare(f"{prefix}dead-letter", durable=True)
    delivery = RabbitDelivery(
        rabbit_url, engine=memory_engine, prefix=prefix, declare=False, repair_after=3600.0
    )
    memory_engine.publisher = delivery
    # when a submit's wake-up fails in the background (unroutable: no queue)
    job = memory_engine.submit("noop")
    assert delivery.flush(10)
    assert delivery.outbox.failed == 1
    channel.queue_declare(
        f"{prefix}default",
        durable=True,
        arguments={"x-queue-type": "classic", "x-dead-letter-exchange": f"{prefix}dead-letter"},
    )
    conn.close()
    republished = delivery.repair(["default"])
    # then the sweep republishes it at once, long before `repair_after`
    assert republished == 1
    bodies = [json.loads(b)["job_id"] for _, b in drain_queue(rabbit_url, f"{prefix}default")]
    assert bodies == [job.id]
    delivery.close()


def test_quorum_queues_carry_wakeups_like_classic_ones(rabbit_url: str, prefix: str) -> None:
    # given a delivery configured for quorum queues
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, queue_type="quorum")
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        # when a job is submitted
        job = engine.submit("noop")
        # then its wake-up arrives through a quorum queue and is settled after the lease
        (wakeup,) = delivery.poll(4, 10.0)
        assert wakeup.job_id == job.id
        engine.claim(OWNER, ["default"], 1, ids=[job.id])
        delivery.settle(wakeup)
        assert delivery.flush(10)
    finally:
        delivery.close()
    conn, channel = raw_channel(rabbit_url)
    with pytest.raises(Exception, match="inequivalent arg 'x-queue-type'"):
        channel.queue_declare(  # same arguments but classic: the broker says it is not
            f"{prefix}default",
            durable=True,
            arguments={"x-queue-type": "classic", "x-dead-letter-exchange": f"{prefix}dead-letter"},
        )
    conn.close()
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_repair_sweep_does_not_republish_the_same_job_twice_within_the_bound(
    rabbit_url: str, prefix: str, memory_engine: Engine
) -> None:
    # given a job whose wake-up was lost, republished by a first sweep and consumed since
    delivery = RabbitDelivery(
        rabbit_url, engine=memory_engine, prefix=prefix, repair_after=0.5, repair_interval=60
    )
    job = memory_engine.submit("noop")
    time.sleep(0.6)
    assert delivery.repair(["default"]) == 1
    assert len(drain_queue(rabbit_url, f"{prefix}default")) == 1  # gone again: ready is 0
    # when sweeps run again before and after the bound
    again = delivery.repair(["default"])
    time.sleep(0.6)
    later = delivery.repair(["default"])
    # then the job is not republished within the bound, and is once the bound has passed
    assert (again, later) == (0, 1)
    assert memory_engine.get(job.id).state == "queued"
    delivery.close()


def test_a_batch_is_published_in_transactions_of_publish_batch_in_order(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery that commits 100 one-job wake-ups per transaction
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, publish_batch=100, wakeup_ids=1)
    try:
        # when 250 jobs are published and waited for (transactions of 100, 100, then 50)
        jobs = engine.submit_many([("noop", {"n": n}, {}) for n in range(250)])
        delivery.publish(jobs, wait=True)
        # then every wake-up is on the broker, persistent, in submit order, none twice
        messages = drain_queue(rabbit_url, f"{prefix}default")
        assert [json.loads(body)["job_id"] for _, body in messages] == [j.id for j in jobs]
        assert {props.delivery_mode for props, _ in messages} == {2}
        assert delivery.publisher.published == 250
    finally:
        delivery.close()


def test_the_jobs_of_one_publish_share_messages_of_at_most_wakeup_ids_in_order(
    rabbit_url: str, prefix: str
) -> None:
    # given a delivery whose wake-ups name up to 64 jobs, two messages per transaction
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, wakeup_ids=64, publish_batch=2)
    try:
        # when 250 jobs of one queue and 3 of another are published and waited for
        jobs = engine.submit_many([("noop", {"n": n}, {}) for n in range(250)])
        others = engine.submit_many([("noop", None, {"queue": "other"})] * 3)
        delivery.publish([*jobs[:100], *others, *jobs[100:]], wait=True)
        # then four version-2 messages of 64, 64, 64 and 58 ids name every job once, in
        # order, persistent; the other queue got one message naming its three jobs
        messages = drain_queue(rabbit_url, f"{prefix}default")
        bodies = [json.loads(body) for _, body in messages]
        assert [b["v"] for b in bodies] == [2, 2, 2, 2]
        assert [len(b["job_ids"]) for b in bodies] == [64, 64, 64, 58]
        assert [i for b in bodies for i in b["job_ids"]] == [j.id for j in jobs]
        assert {props.delivery_mode for props, _ in messages} == {2}
        other = [json.loads(body) for _, body in drain_queue(rabbit_url, f"{prefix}other")]
        assert other == [{"v": 2, "job_ids": [j.id for j in others]}]
        assert delivery.publisher.published == 253
    finally:
        delivery.close()


def test_a_wakeup_is_cut_to_fit_max_message_bytes(rabbit_url: str, prefix: str) -> None:
    # given a delivery whose messages may hold 256 bytes
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, max_message_bytes=256)
    try:
        # when 20 jobs are published
        jobs = engine.submit_many([("noop", None, {})] * 20)
        delivery.publish(jobs, wait=True)
        messages = drain_queue(rabbit_url, f"{prefix}default")
    finally:
        delivery.close()
    # then every message fits and together they name every job once
    assert len(messages) > 1
    assert all(len(body) <= 256 for _, body in messages)
    named = [i for _, body in messages for i in decode(body, limit=256)]
    assert named == [j.id for j in jobs]


def test_an_unroutable_batch_raises_and_its_jobs_stay_queued(rabbit_url: str, prefix: str) -> None:
    # given a publisher that declared its work queue, which is then deleted behind its back
    delivery = RabbitDelivery(rabbit_url, prefix=prefix)
    engine = Engine(MemoryStore())
    delivery.publish([engine.submit("noop")], wait=True)
    conn, channel = raw_channel(rabbit_url)
    channel.queue_delete(f"{prefix}default")
    conn.close()
    jobs = engine.submit_many([("noop", None, {})] * 3)
    # when three wake-ups go out in one transaction
    with pytest.raises(PublishFailed, match=r"unroutable.*\(3 in all\)"):
        delivery.publish(jobs, wait=True)
    # then the broker returned every one of them and the jobs are untouched in the store
    assert delivery.publisher.published == 1
    assert {engine.get(j.id).state for j in jobs} == {"queued"}
    delivery.close()


class CountingStore(MemoryStore):
    """The memory store, counting single-job reads (the unknown-job check makes them)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get(self, job_id: str) -> Any:
        self.reads.append(job_id)
        return super().get(job_id)


def test_only_wakeups_that_led_to_no_lease_are_checked_against_the_store(
    rabbit_url: str, prefix: str
) -> None:
    # given a consuming delivery with an engine, and two jobs: one to claim, one leased already
    store = CountingStore()
    engine = Engine(store)
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        claimed, taken = engine.submit_many([("noop", None, {})] * 2)
        engine.claim(OWNER, ["default"], 1, ids=[taken.id])
        wakeups: list[Any] = []
        wait_until(
            lambda: bool(wakeups.extend(delivery.poll(8, 0.2))) or len(wakeups) == 2, 10, "2"
        )
        # when the worker claims one and settles both, saying which it claimed
        (lease,) = engine.claim(OWNER, ["default"], 2, ids=[claimed.id, taken.id])
        store.reads.clear()
        for w in wakeups:
            delivery.settle(w, claimed=w.job_id == lease.id)
        # then only the unclaimed one is read back (it exists, so nothing is dead-lettered)
        wait_until(lambda: store.reads == [taken.id], 10, "one verification read")
        time.sleep(0.3)
        assert store.reads == [taken.id]
        assert delivery.unknown_jobs == 0
    finally:
        delivery.close()


def test_settling_many_at_once_never_acks_a_delivery_still_held(
    rabbit_url: str, prefix: str
) -> None:
    # given ten one-job wake-ups handed to the worker
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, prefetch=10, wakeup_ids=1)
    engine.publisher = delivery
    delivery.start(["default"])
    jobs = engine.submit_many([("noop", None, {})] * 10)
    wakeups: list[Any] = []
    wait_until(lambda: bool(wakeups.extend(delivery.poll(10, 0.2))) or len(wakeups) == 10, 10, "10")
    assert sorted(w.job_id for w in wakeups) == sorted(j.id for j in jobs)
    # when all but the third are settled together (acked in one drain of the I/O thread)
    held = wakeups[2]
    for w in wakeups:
        if w is not held:
            delivery.settle(w)
    wait_until(lambda: delivery.consumer.stats["acked"] == 9, 10, "nine acks")
    # then closing the consumer returns exactly the held one to the queue
    delivery.close()
    ((_props, body),) = drain_queue(rabbit_url, f"{prefix}default")
    assert json.loads(body)["job_id"] == held.job_id


def test_a_worker_warns_when_jobs_arrive_without_a_wakeup(
    rabbit_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given jobs submitted by an engine with no RabbitMQ publisher (a forgotten setup)
    from fsm import FakeClock

    clock = FakeClock(time.time())
    engine = Engine(MemoryStore(), clock=clock)
    jobs = [engine.submit("noop") for _ in range(3)]
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, repair_after=10.0)
    try:
        # when the worker's repair sweep finds them due past repair_after
        clock.advance(11.0)
        with caplog.at_level(logging.WARNING, logger="adapters.rabbitmq.repair"):
            delivery.repair(["default"])
            delivery.repair(["default"])  # a second sweep does not warn again
        # then it says once, naming the queue, that they came without a wake-up
        warnings = [
            r.getMessage() for r in caplog.records if "without a RabbitMQ" in r.getMessage()
        ]
        assert len(warnings) == 1
        assert "3 job(s) of queue(s) default" in warnings[0]
        assert delivery.repairer is not None
        assert delivery.repairer.unannounced >= len(jobs)
    finally:
        delivery.close()
        drain_queue(rabbit_url, f"{prefix}default")
