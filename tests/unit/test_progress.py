"""Progress: the bounds on its size and rate, in one process (memory store, real threads)."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from typing import Any

import pytest

from adapters.child_pipe import PROGRESS_EVERY, ChildOut
from adapters.memory import MemoryStore
from fsm import Engine, LeasePolicy, Policy, RecoveryPolicy
from fsm.errors import PayloadError, TransientStoreError
from fsm.ports import Outcome, ProgressRequest
from fsm.records import Job
from fsm.service.identity import Identity
from fsm.service.progress import progress_of
from fsm.worker import Worker
from fsm.worker.context import Context

HEARTBEAT = 0.25


class CountingStore(MemoryStore):
    """A memory store that counts progress writes per job."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def save_progress(self, request: ProgressRequest) -> list[str]:
        for job_id in request.items:
            self.writes[job_id] = self.writes.get(job_id, 0) + 1
        return super().save_progress(request)


@pytest.fixture
def engine() -> Engine:
    return Engine(
        CountingStore(),
        policy=Policy(
            lease=LeasePolicy(ttl=3.0, heartbeat_interval=HEARTBEAT),
            recovery=RecoveryPolicy(sweep_interval=0.2),
        ),
    )


def test_a_handler_reporting_a_thousand_times_is_stored_once_per_heartbeat_and_at_the_end(
    engine: Engine,
) -> None:
    # given: a handler that reports progress every millisecond for about 1.5 s
    def chatty(ctx: Context) -> str:
        for i in range(1, 1001):
            ctx.progress(done=i)
            time.sleep(0.0015)
        return "done"

    worker = Worker(
        engine,
        handlers={"chatty": chatty},
        poll_interval=0.05,
        install_signals=False,
        identity=Identity(),
    )
    job = engine.submit("chatty")
    began = time.monotonic()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()

    # when
    done = engine.wait(job.id, timeout=30)
    took = time.monotonic() - began
    worker.stop()
    thread.join(10)

    # then: at most one write per heartbeat interval, plus the final one
    store = engine.store
    assert isinstance(store, CountingStore)
    assert done.state == "succeeded"
    assert 1 <= store.writes[job.id] <= took / HEARTBEAT + 2
    kept = progress_of(done)
    assert kept is not None
    assert kept.value == {"done": 1000}  # the last value, flushed before the outcome


def _ctx(limit: int = 64) -> Context:
    job = Job(
        id="J1", kind="k", queue="q", payload_json="null", state="running",
        created_at=0.0, updated_at=0.0, run_after=0.0,
    )  # fmt: skip
    return Context(job, threading.Event(), progress_limit=limit)


def test_progress_over_the_limit_raises_naming_the_job_and_keeps_the_previous_value() -> None:
    ctx = _ctx(limit=64)
    ctx.progress(step="small")

    with pytest.raises(
        PayloadError, match=r"progress of job J1 is \d+ bytes, over the limit of 64"
    ):
        ctx.progress(blob="x" * 100)

    assert ctx.latest_progress()[:2] == (1, '{"step":"small"}')


def test_progress_that_is_not_json_raises_and_records_nothing() -> None:
    ctx = _ctx()
    with pytest.raises(PayloadError, match="progress of job J1 is not JSON-serializable"):
        ctx.progress(when=object())
    assert ctx.latest_progress() == (0, None, None)


def test_progress_from_a_child_that_is_not_a_json_object_within_the_limit_is_dropped() -> None:
    ctx = _ctx(limit=64)
    for bad in ('"a string"', "{not json", '{"x":"' + "y" * 100 + '"}'):
        ctx.progress_from(bad)
    assert ctx.latest_progress()[0] == 0
    ctx.progress_from('{"done":2}')
    assert ctx.latest_progress()[:2] == (1, '{"done":2}')


def test_a_child_sends_progress_at_most_every_bound_and_its_last_value_before_the_outcome() -> None:
    # given: the child's end of a real pipe, and a handler reporting in a tight loop
    parent, child = multiprocessing.Pipe(duplex=True)
    out = ChildOut(child)
    send = out.progress_sender("J1", 3)
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < 1.0:
        i += 1
        send(f'{{"done":{i}}}')
    took = time.monotonic() - began

    # when: the attempt ends
    out.outcome(Outcome(status="succeeded", result_json="1"))

    # then: few messages, and the last progress (the final value) precedes the outcome
    messages: list[Any] = []
    while parent.poll(0.5):
        messages.append(parent.recv_bytes().decode())
    progress = [m for m in messages if m.startswith('{"progress":')]
    assert messages[-1].startswith('{"status":"succeeded"')
    assert len(progress) <= took / PROGRESS_EVERY + 2
    assert progress[-1] == json.dumps({"progress": f'{{"done":{i}}}', "job": "J1", "fence": 3})
    parent.close()
    child.close()


def test_a_handler_that_fails_after_a_cancel_its_worker_has_not_seen_is_acknowledged(
    engine: Engine,
) -> None:
    # given: a long heartbeat, so the worker does not see the cancel before the handler ends
    slow = Engine(
        engine.store,
        policy=Policy(
            lease=LeasePolicy(ttl=60.0, heartbeat_interval=30.0),
            recovery=RecoveryPolicy(sweep_interval=0.2),
        ),
    )
    cancelled = threading.Event()

    def fragile(ctx: Context) -> None:
        ctx.progress(done=3)
        assert cancelled.wait(10)
        raise RuntimeError("upstream closed the connection")

    worker = Worker(
        slow, handlers={"fragile": fragile}, poll_interval=0.05, install_signals=False,
        identity=Identity(),
    )  # fmt: skip
    job = slow.submit("fragile")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while slow.get(job.id).state != "running" and time.monotonic() < deadline:
        time.sleep(0.01)

    # when: it is cancelled, and the handler then fails (its `fail` finds `cancelling`)
    slow.cancel(job.id, actor="ops", reason="enough")
    cancelled.set()
    done = slow.wait(job.id, timeout=10)
    worker.stop()
    thread.join(10)

    # then: acknowledged as cancelled at once, its latest progress kept
    assert done.state == "cancelled"
    assert [e.event for e in slow.history(job.id)][-2:] == ["cancel", "cancelled_ack"]
    assert done.result == {"done": 3}


class FailingProgressStore(MemoryStore):
    """A memory store whose next `failures` progress writes fail as a lost connection."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def save_progress(self, request: ProgressRequest) -> list[str]:
        if self.failures > 0:
            self.failures -= 1
            raise TransientStoreError("progress write fails (test)")
        return super().save_progress(request)


@pytest.mark.parametrize("failures", [1, 2])
def test_the_last_progress_is_kept_when_its_write_at_the_end_of_the_attempt_fails(
    failures: int,
) -> None:
    # given: heartbeats too rare to write anything, so the only write of the handler's
    # progress is the one before its outcome, and the store fails it `failures` times
    store = FailingProgressStore(failures)
    slow = Engine(
        store,
        policy=Policy(
            lease=LeasePolicy(ttl=60.0, heartbeat_interval=30.0),
            recovery=RecoveryPolicy(sweep_interval=0.2),
        ),
    )

    def steps(ctx: Context) -> str:
        ctx.progress(done=7)
        return "done"

    worker = Worker(
        slow, handlers={"steps": steps}, poll_interval=0.05, install_signals=False,
        identity=Identity(),
    )  # fmt: skip
    job = slow.submit("steps")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()

    # when: the handler ends and its progress and outcome are written
    done = slow.wait(job.id, timeout=10)
    worker.stop()
    thread.join(10)

    # then: the write was tried again before the report, and the last value is kept
    assert done.state == "succeeded"
    assert store.failures == 0
    kept = progress_of(done)
    assert kept is not None
    assert kept.value == {"done": 7}
