"""Multi-job wake-ups (message format version 2): one message names many jobs, a worker
with fewer free slots than ids loses none, a worker by_child while holding one loses none,
and the one-job messages of older publishers (version 1) still work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.rabbitmq import RabbitDelivery
from adapters.rabbitmq.messages import MAX_IDS, PoisonMessage, decode, encode_many
from fsm import Engine, open_store
from fsm.records import Job
from fsm.service.identity import Identity
from fsm.worker import Worker

from .helpers import FencedEffects, ready_count, wait_until

REPO = Path(__file__).resolve().parents[3]
LIMIT = 64 * 1024


# --- the message format (no broker needed) ---------------------------------------------


def test_a_version_2_message_names_its_jobs_once_each_in_order() -> None:
    assert decode(b'{"v":2,"job_ids":["a","b","a","c"]}', limit=LIMIT) == ("a", "b", "c")
    assert decode(encode_many(["x", "y"]), limit=LIMIT) == ("x", "y")


def test_a_version_1_message_of_an_older_publisher_names_its_one_job() -> None:
    old = {"job_id": "j1", "kind": "noop", "fence": 0, "version": 1, "correlation_id": None}
    assert decode(json.dumps(old).encode(), limit=LIMIT) == ("j1",)
    assert decode(b'{"v": 1, "job_id": "j2"}', limit=LIMIT) == ("j2",)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"v": 3, "job_ids": ["a"]}', "version 3 is not known"),
        (b'{"v": true, "job_id": "a"}', "version True is not known"),
        (b'{"v": "2", "job_ids": ["a"]}', "version '2' is not known"),
        (b'{"v": 2, "job_ids": []}', "list of 1 to 256 ids (got 0 ids)"),
        (b'{"v": 2, "job_ids": "a"}', "list of 1 to 256 ids (got 'a')"),
        (b'{"v": 2, "job_id": "a"}', "list of 1 to 256 ids (got None)"),
        (b'{"v": 2, "job_ids": ["a", 7]}', "invalid job id at 1 (7)"),
        (b'{"v": 2, "job_ids": ["a", "b\\u0007"]}', "invalid job id at 1"),
        (b'{"v": 2, "job_ids": [["a"]]}', "nests JSON"),
        (b'{"v": 2, "job_ids": ["a"], "x": {}}', "nests JSON"),
        (b'{"v": 2, "job_ids": ["a"], "x": []}', "nests JSON"),
    ],
)
def test_a_malformed_version_2_message_is_poison_with_a_reason(body: bytes, words: str) -> None:
    with pytest.raises(PoisonMessage, match=None) as caught:
        decode(body, limit=LIMIT)
    assert words in caught.value.reason


def test_a_message_naming_more_than_max_ids_jobs_is_poison() -> None:
    body = json.dumps({"v": 2, "job_ids": [f"j{n}" for n in range(MAX_IDS + 1)]}).encode()
    with pytest.raises(PoisonMessage, match=f"got {MAX_IDS + 1} ids"):
        decode(body, limit=LIMIT)
    with pytest.raises(ValueError, match="1 to 256 jobs"):
        encode_many([f"j{n}" for n in range(MAX_IDS + 1)])


# --- a real broker, a real PostgreSQL store, the real Worker ---------------------------


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[Engine]:
    engine = Engine(open_store(pg_url))
    yield engine
    engine.store.close()


def _unannounced(engine: Engine, count: int, kind: str = "noop") -> list[Job]:
    """`count` retry-safe jobs submitted without a wake-up (the test publishes its own)."""
    publisher, engine.publisher = engine.publisher, None
    try:
        return engine.submit_many([(kind, None, {"retry_safe": True})] * count)
    finally:
        engine.publisher = publisher


class _Running:
    """A Worker on a thread, stopped (and joined) at the end."""

    def __init__(self, engine: Engine, delivery: RabbitDelivery, concurrency: int) -> None:
        self.effects = FencedEffects(engine)
        self.worker = Worker(
            engine,
            {"noop": lambda ctx: self.effects.commit(ctx.job.id, ctx.fence)},
            delivery=delivery,
            concurrency=concurrency,
            poll_interval=0.1,
            install_signals=False,
            identity=Identity(),
            scheduler=False,
        )
        self._thread = threading.Thread(target=self.worker.run)

    def __enter__(self) -> _Running:
        self._thread.start()
        assert self.worker.wait_started(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.worker.stop()
        self._thread.join(30)


def _all_succeeded(engine: Engine, jobs: list[Job]) -> bool:
    return all(engine.get(j.id).state == "succeeded" for j in jobs)


def test_many_jobs_in_few_messages_each_run_exactly_once(
    rabbit_url: str, prefix: str, pg_engine: Engine
) -> None:
    # given a Worker woken through RabbitMQ and a submitter publishing through the outbox
    delivery = RabbitDelivery(rabbit_url, engine=pg_engine, prefix=prefix, wakeup_ids=64)
    pg_engine.publisher = delivery
    try:
        with _Running(pg_engine, delivery, concurrency=16) as running:
            # when 600 jobs are submitted in three batches
            jobs = [j for _ in range(3) for j in pg_engine.submit_many([("noop", None, {})] * 200)]
            wait_until(lambda: _all_succeeded(pg_engine, jobs), 60, "all 600 jobs")
            acked = delivery.consumer.stats["acked"]
    finally:
        delivery.close()
    # then each ran once under one fence, from far fewer messages than jobs, all acked
    assert sorted(running.effects.committed) == sorted(j.id for j in jobs)
    assert all(len(fences) == 1 for fences in running.effects.committed.values())
    assert acked <= 600 // 8
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_a_worker_with_fewer_free_slots_than_ids_loses_none_and_acks_once(
    rabbit_url: str, prefix: str, pg_engine: Engine
) -> None:
    # given one message naming 40 jobs, and a Worker with 3 slots
    delivery = RabbitDelivery(rabbit_url, engine=pg_engine, prefix=prefix, prefetch=1)
    jobs = _unannounced(pg_engine, 40)
    delivery.publish(jobs, wait=True)
    assert delivery.publisher.published == 40
    try:
        with _Running(pg_engine, delivery, concurrency=3) as running:
            # when it works through them
            wait_until(lambda: _all_succeeded(pg_engine, jobs), 60, "all 40 jobs")
            wait_until(lambda: delivery.consumer.stats["acked"] == 1, 10, "the one ack")
            stats = dict(delivery.consumer.stats)
    finally:
        delivery.close()
    # then every job ran once, the message was acked once (after its last job) and never
    # given back, and nothing is left on the broker
    assert sorted(running.effects.committed) == sorted(j.id for j in jobs)
    assert all(len(fences) == 1 for fences in running.effects.committed.values())
    assert stats.get("returned", 0) == 0
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_a_multi_job_message_is_not_acked_while_one_of_its_jobs_is_unsettled(
    rabbit_url: str, prefix: str, pg_engine: Engine
) -> None:
    # given a message naming 5 jobs, handed out 2 at a time
    delivery = RabbitDelivery(rabbit_url, engine=pg_engine, prefix=prefix, prefetch=1)
    jobs = _unannounced(pg_engine, 5)
    delivery.publish(jobs, wait=True)
    delivery.start(["default"])
    try:
        first: list[Any] = []
        wait_until(lambda: bool(first.extend(delivery.poll(2, 0.2))) or bool(first), 10, "ids")
        rest = delivery.poll(10, 0.0)
        # when all but one are settled
        for wakeup in [*first, *rest[:-1]]:
            delivery.settle(wakeup)
        time.sleep(0.5)
        acked_early = delivery.consumer.stats["acked"]
        # and then the last one
        delivery.settle(rest[-1])
        wait_until(lambda: delivery.consumer.stats["acked"] == 1, 10, "the ack")
    finally:
        delivery.close()
    # then the ids came out 2, then 3, and the message was acked only after the last
    assert [len(first), len(rest)] == [2, 3]
    assert [w.job_id for w in [*first, *rest]] == [j.id for j in jobs]
    assert acked_early == 0
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_a_multi_job_message_held_past_max_hold_goes_back_whole_and_its_ids_come_again(
    rabbit_url: str, prefix: str, pg_engine: Engine
) -> None:
    # given a message naming 5 jobs, 2 of them handed out and never settled
    delivery = RabbitDelivery(
        rabbit_url, engine=pg_engine, prefix=prefix, prefetch=1, max_hold=1.0, idle_check=0.05
    )
    jobs = _unannounced(pg_engine, 5)
    delivery.publish(jobs, wait=True)
    delivery.start(["default"])
    try:
        first: list[Any] = []
        wait_until(lambda: bool(first.extend(delivery.poll(2, 0.2))) or bool(first), 10, "ids")
        # when the hold passes max_hold
        wait_until(lambda: delivery.consumer.stats["returned"] == 1, 10, "the message returned")
        again: list[Any] = []
        wait_until(lambda: bool(again.extend(delivery.poll(10, 0.2))) or bool(again), 10, "ids")
        for wakeup in again:
            delivery.settle(wakeup)
        wait_until(lambda: delivery.consumer.stats["acked"] == 1, 10, "the ack")
        # a late settle of a part of the returned delivery acks nothing
        for wakeup in first:
            delivery.settle(wakeup)
        time.sleep(0.3)
        acked = delivery.consumer.stats["acked"]
    finally:
        delivery.close()
    # then the message came back whole: its 5 ids once each, none of the 3 that were
    # waiting from the returned copy; the redelivery alone was acked
    assert len(first) == 2
    assert [w.job_id for w in again] == [j.id for j in jobs]
    assert {w.token.message for w in again} != {w.token.message for w in first}
    assert acked == 1
    assert ready_count(rabbit_url, f"{prefix}default") == 0


def test_old_format_messages_still_wake_a_new_worker(
    rabbit_url: str, prefix: str, pg_engine: Engine
) -> None:
    # given one-job messages in the version-1 format, as older publishers send them,
    # beside a version-2 message, in one queue
    delivery = RabbitDelivery(rabbit_url, engine=pg_engine, prefix=prefix)
    old = _unannounced(pg_engine, 3)
    new = _unannounced(pg_engine, 3)
    for job in old:
        body = {"job_id": job.id, "kind": job.kind, "fence": 0, "version": 1}
        delivery.publisher.publish_raw(
            "default", json.dumps({**body, "correlation_id": None}).encode()
        )
    delivery.publish(new, wait=True)
    try:
        with _Running(pg_engine, delivery, concurrency=4) as running:
            # when the worker runs
            wait_until(lambda: _all_succeeded(pg_engine, old + new), 30, "all six jobs")
    finally:
        delivery.close()
    # then every job ran once, whichever format woke it
    assert sorted(running.effects.committed) == sorted(j.id for j in old + new)
    assert all(len(fences) == 1 for fences in running.effects.committed.values())


CHILD = """
import os, sys, time
from pathlib import Path
from adapters.rabbitmq import RabbitDelivery
from fsm import Engine, open_store
from fsm.worker import Worker
from fsm.worker.handlers import Handlers

store_url, rabbit_url, prefix, folder = sys.argv[1:5]
handlers = Handlers()

@handlers.handler("slow", retry_safe=True)
def slow(ctx):
    (Path(folder) / f"{ctx.job.id}.{ctx.attempt}.started.{os.getpid()}").touch()
    time.sleep(0.4)

engine = Engine(open_store(store_url))
delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, repair_after=60.0)
Worker(engine, handlers, delivery=delivery, concurrency=2, poll_interval=0.1,
       scheduler=False).run()
"""


def _started(folder: Path) -> list[tuple[str, int, int]]:
    """(job id, attempt, pid) of every attempt that started."""
    out = []
    for path in folder.iterdir():
        job_id, attempt, _what, pid = path.name.split(".")
        out.append((job_id, int(attempt), int(pid)))
    return out


def test_sigkill_of_a_worker_holding_a_multi_job_message_loses_no_job(
    rabbit_url: str, prefix: str, pg_url: str, pg_engine: Engine, tmp_path: Path
) -> None:
    # given a worker process with 2 slots holding a message that names 16 jobs
    folder = tmp_path / "marks"
    folder.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = (tmp_path / "child.log").open("wb")
    child = subprocess.Popen(
        [sys.executable, str(script), pg_url, rabbit_url, prefix, str(folder)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    delivery = RabbitDelivery(
        rabbit_url, engine=pg_engine, prefix=prefix, repair_interval=0.5, repair_after=60.0
    )
    try:
        jobs = _unannounced(pg_engine, 16, kind="slow")
        delivery.publish(jobs, wait=True)
        # when it is by_child with SIGKILL after starting a few of them
        wait_until(lambda: len(_started(folder)) >= 3, 60, "the child to start 3 jobs")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        by_child = {job_id for job_id, _a, pid in _started(folder) if pid == child.pid}
        # and another worker takes over
        handler_pid = os.getpid()

        def slow(ctx: Any) -> None:
            (folder / f"{ctx.job.id}.{ctx.attempt}.started.{handler_pid}").touch()

        survivor = Worker(
            pg_engine, {"slow": slow}, delivery=delivery, concurrency=4, poll_interval=0.1,
            install_signals=False, identity=Identity(), scheduler=False,
        )  # fmt: skip
        runner = threading.Thread(target=survivor.run)
        runner.start()
        try:
            wait_until(lambda: _all_succeeded(pg_engine, jobs), 60, "all 16 jobs")
        finally:
            survivor.stop()
            runner.join(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        log.close()
        delivery.close()
    # then every job succeeded; the jobs the killed worker never leased ran exactly once,
    # at their first attempt, by the survivor: they came back with the unacked message
    # (repair_after is 60 s, so no repair sweep announced them). A job it had leased
    # but not yet started (killed between its claim and its handler's first line) was
    # recovered from the dead owner: the survivor ran it once, at its second attempt.
    started = _started(folder)
    assert 3 <= len(by_child) < 16
    recovered = {
        j.id
        for j in jobs
        if any(e.event == "expire" and e.outcome == "applied" for e in pg_engine.history(j.id))
    }
    for job_id in recovered - by_child:
        assert [(a, pid) for i, a, pid in started if i == job_id] == [(2, handler_pid)]
    untouched = {j.id for j in jobs} - by_child - recovered
    assert len(untouched) >= 16 - len(by_child) - 2  # the child leases for its 2 slots
    for job_id in untouched:
        assert [(a, pid) for i, a, pid in started if i == job_id] == [(1, handler_pid)]
    for job in jobs:
        succeeded = [
            e
            for e in pg_engine.history(job.id)
            if e.to_state == "succeeded" and e.outcome == "applied"
        ]
        assert len(succeeded) == 1
