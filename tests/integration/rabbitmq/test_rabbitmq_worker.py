"""The Worker end to end with RabbitMQ delivery and the SQLite store."""

from __future__ import annotations

import threading
import time
from typing import Any

from adapters.rabbitmq import DeliveryFailed, RabbitDelivery
from adapters.rabbitmq.relay import Relay
from fsm import Engine, open_store
from fsm.service.identity import Identity
from fsm.worker import Worker

from .helpers import FencedEffects, raw_channel, wait_until


def _worker(engine: Engine, delivery: RabbitDelivery, handler: Any) -> Worker:
    return Worker(
        engine,
        {"noop": handler},
        delivery=delivery,
        concurrency=8,
        poll_interval=0.2,
        install_signals=False,
        identity=Identity(),
    )


def test_worker_runs_2000_jobs_each_once_through_three_forced_connection_closures(
    relay: Relay, prefix: str, sqlite_url: str
) -> None:
    # given a Worker on SQLite, woken through RabbitMQ, whose handler commits a fenced effect
    engine = Engine(open_store(sqlite_url))
    delivery = RabbitDelivery(
        relay.url,
        engine=engine,
        prefix=prefix,
        recovery_interval=0.5,
        idle_check=0.05,
        repair_after=2.0,
        repair_interval=1.0,
    )
    engine.publisher = delivery
    effects = FencedEffects(engine)
    worker = _worker(engine, delivery, lambda ctx: effects.commit(ctx.job.id, ctx.fence))
    runner = threading.Thread(target=worker.run)
    ids: list[str] = []
    unfinished_at_closure: list[int] = []

    def unfinished() -> int:
        return sum(n for (_q, s), n in engine.counts().items() if s != "succeeded")

    def produce() -> None:
        for _ in range(20):
            ids.extend(j.id for j in engine.submit_many([("noop", {}, {})] * 100))

    producer = threading.Thread(target=produce)
    try:
        runner.start()
        assert worker.wait_started(10)
        # when 2000 jobs flow while the broker force-closes the worker's connections 3 times
        producer.start()
        for k in range(3):
            wait_until(lambda k=k: len(ids) >= 400 * (k + 1), 60, "submissions to progress")
            generation = delivery.consumer.generation
            unfinished_at_closure.append(unfinished())
            assert relay.force_close() >= 1
            wait_until(
                lambda g=generation: delivery.ready and delivery.consumer.generation > g,
                30,
                "the consumer to recover",
            )
        producer.join(60)
        wait_until(lambda: len(ids) == 2000 and unfinished() == 0, 120, "all 2000 jobs")
        assert worker.ready
    finally:
        worker.stop()
        runner.join(30)
    # then every job succeeded and committed its effect exactly once; recovery within budget
    assert unfinished_at_closure[0] > 0
    assert {engine.get(i).state for i in ids} == {"succeeded"}
    engine.store.close()
    assert sorted(effects.committed) == sorted(ids)
    assert all(len(fences) == 1 for fences in effects.committed.values())
    assert delivery.consumer.stats["recoveries"] == 3
    assert delivery.consumer.failure is None


def test_worker_fails_loudly_when_the_delivery_fails_for_good(
    rabbit_url: str, prefix: str, sqlite_url: str
) -> None:
    # given a Worker whose delivery may not declare queues (they were created by an operator)
    conn, channel = raw_channel(rabbit_url)
    channel.exchange_declare(f"{prefix}dead-letter", exchange_type="fanout", durable=True)
    channel.queue_declare(f"{prefix}dead-letter", durable=True)
    channel.queue_declare(
        f"{prefix}default",
        durable=True,
        arguments={"x-queue-type": "classic", "x-dead-letter-exchange": f"{prefix}dead-letter"},
    )
    engine = Engine(open_store(sqlite_url))
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, declare=False, recovery_interval=0.2)
    worker = _worker(engine, delivery, lambda ctx: None)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as err:
            failure.append(err)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert worker.wait_started(10)
        wait_until(lambda: delivery.ready, 10, "delivery readiness")
        # when its queue is deleted (consumer cancelled; the passive redeclare finds no queue)
        channel.queue_delete(f"{prefix}default")
        runner.join(20)
    finally:
        conn.close()
        worker.stop(now=True)
        runner.join(10)
        engine.store.close()
    # then run() ends with the delivery's error, and the worker is not ready
    assert len(failure) == 1
    assert isinstance(failure[0], DeliveryFailed)
    assert "not-found" in str(failure[0])
    assert not worker.ready


def test_handed_out_wakeup_never_settled_is_returned_after_max_hold(
    rabbit_url: str, prefix: str
) -> None:
    # given a wake-up handed to a worker whose claim then failed (it never settles)
    from adapters.memory import MemoryStore

    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, prefix=prefix, max_hold=0.3, idle_check=0.05)
    engine.publisher = delivery
    delivery.start(["default"])
    try:
        job = engine.submit("noop")
        assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
        # when max_hold passes, then the delivery goes back to the broker and comes again
        wait_until(lambda: delivery.consumer.stats["returned"] >= 1, 10, "the hold bound")
        assert [w.job_id for w in delivery.poll(4, 5.0)] == [job.id]
    finally:
        delivery.close()


def test_worker_stop_interrupts_a_blocked_poll(
    rabbit_url: str, prefix: str, sqlite_url: str
) -> None:
    # given an idle Worker waiting on RabbitMQ with a long poll interval
    engine = Engine(open_store(sqlite_url))
    delivery = RabbitDelivery(rabbit_url, prefix=prefix)
    worker = Worker(
        engine,
        {"noop": lambda ctx: None},
        delivery=delivery,
        poll_interval=30.0,
        install_signals=False,
        identity=Identity(),
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    assert worker.wait_started(10)
    time.sleep(0.3)
    # when it is stopped
    started = time.monotonic()
    worker.stop()
    runner.join(20)
    engine.store.close()
    # then it stops long before the poll interval
    assert not runner.is_alive()
    assert time.monotonic() - started < 10.0


def test_retried_job_is_woken_again_by_the_repair_sweep_and_succeeds(
    rabbit_url: str, prefix: str, sqlite_url: str
) -> None:
    # given a handler that asks for a retry on its first attempt
    from fsm import Retry

    engine = Engine(open_store(sqlite_url))
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, repair_interval=0.3)
    engine.publisher = delivery
    attempts: list[int] = []

    def flaky(ctx: Any) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise Retry(after=0.2)

    worker = _worker(engine, delivery, flaky)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert worker.wait_started(10)
        # when the job runs, fails with a retry and waits out its backoff
        job = engine.submit("noop")
        # then, with no message ever published for the retry, the sweep wakes it and it succeeds
        wait_until(lambda: engine.get(job.id).state == "succeeded", 15, "the retried job")
        assert attempts == [1, 2]
        assert delivery.repairer is not None
        assert delivery.repairer.republished >= 1
    finally:
        worker.stop()
        runner.join(20)
    engine.store.close()
