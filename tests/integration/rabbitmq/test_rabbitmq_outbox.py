"""The asynchronous outbox against the real broker: its bound, and concurrent submitters."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import RabbitDelivery
from adapters.rabbitmq.errors import PublishFailed
from adapters.rabbitmq.messages import decode
from adapters.rabbitmq.relay import Relay
from fsm import Engine, Job

from .helpers import drain_queue, raw_channel


def _published_ids(rabbit_url: str, queue: str) -> list[str]:
    return [
        job_id
        for _, body in drain_queue(rabbit_url, queue)
        for job_id in decode(body, limit=64 * 1024)
    ]


def _jobs(n: int) -> list[Job]:
    """`n` committed jobs, announced by nobody yet (no publisher on this engine)."""
    engine = Engine(MemoryStore())
    return engine.submit_many([("noop", {"i": i}, {}) for i in range(n)])


def test_a_full_outbox_queues_up_to_its_limit_and_leaves_the_rest_to_the_repair_sweep(
    rabbit_url: str, prefix: str
) -> None:
    # given an outbox that holds 5 wake-ups at most
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, outbox_limit=5)
    jobs = _jobs(8)
    try:
        # when a submit of 8 jobs queues their wake-ups at once
        delivery.publish(jobs)
        assert delivery.flush(10.0)
    finally:
        delivery.close()
    # then the first 5 are published, the other 3 are counted and kept for the repair sweep
    assert sorted(_published_ids(rabbit_url, f"{prefix}default")) == sorted(j.id for j in jobs[:5])
    assert delivery.outbox.dropped == 3
    assert list(delivery.outbox.lost) == [j.id for j in jobs[5:]]
    assert delivery.outbox.failed == 0


def test_wake_ups_queued_by_many_threads_are_each_published_once(
    rabbit_url: str, prefix: str
) -> None:
    # given 8 submitting threads sharing one delivery's outbox and its 4 senders
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, wakeup_ids=16, publish_batch=4)
    chunks = [_jobs(240) for _ in range(8)]
    start = threading.Barrier(len(chunks))

    def submitter(jobs: list[Job]) -> None:
        start.wait()
        for i in range(0, len(jobs), 30):  # 8 puts each, racing the others and the senders
            delivery.publish(jobs[i : i + 30])

    threads = [threading.Thread(target=submitter, args=(c,)) for c in chunks]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        conn, channel = raw_channel(rabbit_url)  # open before flush: read right after it
        try:
            # when flush returns: every queued batch was taken and its publish committed
            assert delivery.flush(30.0)
            # then every message is in the queue already (none still being committed)
            queue = f"{prefix}default"
            counted = channel.queue_declare(queue, passive=True).method.message_count
            published: list[str] = []
            messages = 0
            while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
                published += decode(got[2], limit=64 * 1024)
                messages += 1
            assert counted == messages
        finally:
            conn.close()
    finally:
        delivery.close()
    assert sorted(published) == sorted(j.id for c in chunks for j in c)
    assert (delivery.outbox.dropped, delivery.outbox.failed) == (0, 0)


def test_a_wake_up_queued_to_an_idle_outbox_is_published_at_once(
    rabbit_url: str, prefix: str
) -> None:
    # given an outbox whose senders went idle (they wait up to half a heartbeat, 15 s)
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, heartbeat=30)
    first, second = _jobs(2)
    try:
        delivery.publish([first])
        assert delivery.flush(10.0)
        time.sleep(0.3)
        # when another wake-up is queued
        delivery.publish([second])
        # then a sender is woken for it: it is published within seconds, not a heartbeat
        assert delivery.flush(3.0)
    finally:
        delivery.close()
    assert sorted(_published_ids(rabbit_url, f"{prefix}default")) == sorted([first.id, second.id])


def test_flush_waits_for_the_batch_a_sender_is_publishing(rabbit_url: str, prefix: str) -> None:
    # given one batch of 500 one-job messages, taken by a sender and still being published
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, wakeup_ids=1, publish_batch=500)
    jobs = _jobs(500)
    conn, channel = raw_channel(rabbit_url)
    try:
        delivery.publish(jobs)
        time.sleep(0.005)  # the sender has taken the batch: nothing is left waiting
        # when flush returns
        assert delivery.flush(30.0)
        # then the batch's transaction was committed: all 500 messages are in the queue
        counted = channel.queue_declare(f"{prefix}default", passive=True).method.message_count
    finally:
        conn.close()
        delivery.close()
    assert counted == 500


def test_idle_senders_keep_their_connections_alive_past_the_heartbeat(
    rabbit_url: str, prefix: str
) -> None:
    # given senders with a 1 s heartbeat that published once, each on its connection
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, heartbeat=1, publisher_threads=2)
    first, second = _jobs(2)
    try:
        delivery.publish([first])
        assert delivery.flush(10.0)
        publishers = delivery.outbox.publishers
        assert sum(p.connections for p in publishers) == 1
        # when they stay idle for four heartbeats (the broker closes a connection that
        # misses two)
        time.sleep(4.0)
        delivery.publish([second])
        assert delivery.flush(10.0)
        # then no connection was lost (each sender opened at most one, still open): the
        # second wake-up went out on the first one or on the other sender's first
        assert [p.connections for p in publishers] in ([1, 0], [0, 1], [1, 1])
        assert all(p.connected for p in publishers if p.connections)
    finally:
        delivery.close()
    assert sorted(_published_ids(rabbit_url, f"{prefix}default")) == sorted([first.id, second.id])


def test_a_repair_sweep_that_fails_keeps_the_known_lost_wake_ups_for_the_next(
    rabbit_url: str, prefix: str, relay: Relay
) -> None:
    # given committed jobs whose wake-ups the outbox failed to publish (their ids kept)
    engine = Engine(MemoryStore())
    jobs = engine.submit_many([("noop", {"i": i}, {}) for i in range(3)])
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, repair_after=600.0)
    assert delivery.repairer is not None
    delivery.outbox.lost.extend(j.id for j in jobs)
    try:
        # when a repair sweep runs while the broker is down
        with relay.outage():
            with pytest.raises(PublishFailed):
                delivery.repair(["default"])
            # then the ids are still known lost, first in line
            assert list(delivery.outbox.lost) == [j.id for j in jobs]
        # and the next sweep, with the broker back, republishes them at once (not after
        # repair_after, 600 s here)
        assert delivery.repair(["default"]) == 3
    finally:
        delivery.close()
    assert sorted(_published_ids(rabbit_url, f"{prefix}default")) == sorted(j.id for j in jobs)
    assert not delivery.outbox.lost
