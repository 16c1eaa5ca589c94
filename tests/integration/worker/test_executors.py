"""Thread and process executors with real threads and real child processes."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.executors import ProcessExecutor, ThreadExecutor
from adapters.memory import MemoryStore
from fsm import Engine, LeasePolicy, Policy
from fsm.ports import Attempt, Outcome
from fsm.records import Job, job_to_json
from fsm.service.identity import Identity
from fsm.worker import Worker
from fsm.worker.context import Context, handler_path, run_attempt

from . import app
from .helpers import markers, wait_for


def _job(kind: str, payload: Any = None) -> Job:
    engine = Engine(MemoryStore())
    engine.submit(kind, payload)
    (leased,) = engine.claim(Identity().owner, limit=1)
    return engine.start(leased.id, leased.fence)


def _attempt(fn: Callable[[Context], Any], job: Job, timeout: float = 30.0) -> Attempt:
    token = threading.Event()
    return Attempt(
        job=job,
        timeout=timeout,
        target=handler_path(fn),
        job_json=job_to_json(job),
        run=lambda: run_attempt(fn, Context(job, token)),
        cancelled=token,
    )


class Results:
    """Collects (job id, outcome) from an executor's callbacks."""

    def __init__(self) -> None:
        self.q: queue.Queue[tuple[str, Outcome]] = queue.Queue()

    def __call__(self, attempt: Attempt, outcome: Outcome) -> None:
        self.q.put((attempt.job.id, outcome))

    def next(self, timeout: float = 20.0) -> tuple[str, Outcome]:
        return self.q.get(timeout=timeout)


@pytest.fixture
def procs() -> Iterator[ProcessExecutor]:
    ex = ProcessExecutor()
    ex.start(2)
    try:
        yield ex
    finally:
        ex.shutdown(wait=2.0)


def test_process_executor_survives_a_segfaulting_child(procs: ProcessExecutor) -> None:
    results = Results()
    crash = _job("segfault")
    pids_before = set(procs.children())

    procs.submit(_attempt(app.segfault, crash), results)
    job_id, outcome = results.next()

    assert job_id == crash.id
    assert outcome.status == "crashed"
    assert "SIGSEGV" in (outcome.error or "")
    # the pool replaced the dead child and keeps working
    wait_for(lambda: procs.free == 2, 20, "a replacement child")
    assert set(procs.children()) != pids_before
    ok = _job("noop")
    procs.submit(_attempt(app.noop, ok), results)
    assert results.next()[1].status == "succeeded"


def test_process_executor_reports_a_child_that_exits_abruptly(procs: ProcessExecutor) -> None:
    results = Results()

    procs.submit(_attempt(app.hard_exit, _job("exit")), results)

    outcome = results.next()[1]
    assert outcome.status == "crashed"
    assert "exited with status 3" in (outcome.error or "")


def test_process_executor_kills_an_attempt_past_its_timeout(
    procs: ProcessExecutor, tmp_path: Path
) -> None:
    results = Results()
    job = _job("stubborn", {"dir": str(tmp_path), "seconds": 60})

    began = time.monotonic()
    procs.submit(_attempt(app.stubborn, job, timeout=0.5), results)
    outcome = results.next()[1]

    assert outcome.status == "timeout"
    assert "child killed" in (outcome.error or "")
    assert time.monotonic() - began < 5.0


def test_process_executor_forwards_the_cancel_token_and_kills_on_hard_cancel(
    procs: ProcessExecutor, tmp_path: Path
) -> None:
    results = Results()
    polite = _job("sleep", {"dir": str(tmp_path), "first": 60})
    stubborn = _job("stubborn", {"dir": str(tmp_path), "seconds": 60})
    procs.submit(_attempt(app.sleep, polite), results)
    procs.submit(_attempt(app.stubborn, stubborn), results)
    wait_for(lambda: markers(tmp_path, polite.id, "started"), 20, "polite start")
    wait_for(lambda: markers(tmp_path, stubborn.id, "started"), 20, "stubborn start")

    procs.cancel(polite.id)  # soft: the child's handler sees its token
    procs.cancel(stubborn.id)  # soft: ignored by this handler
    first = results.next()
    procs.cancel(stubborn.id, hard=True, reason="cancel grace passed")
    second = results.next()

    assert first[0] == polite.id
    assert first[1].status == "cancelled"
    assert second[0] == stubborn.id
    assert second[1].status == "killed"
    assert second[1].error == "cancel grace passed"


def test_process_executor_restart_drops_late_results_of_the_old_generation(
    procs: ProcessExecutor, tmp_path: Path
) -> None:
    results = Results()
    job = _job("stubborn", {"dir": str(tmp_path), "seconds": 60})
    procs.submit(_attempt(app.stubborn, job), results)
    wait_for(lambda: markers(tmp_path, job.id, "started"), 20, "start")
    old_children = set(procs.children())

    procs.restart("test")
    (job_id, outcome) = results.next()

    assert (job_id, outcome.status) == (job.id, "killed")
    assert procs.generation == 1
    assert not set(procs.children()) & old_children
    wait_for(lambda: procs.free == 2, 20, "the new generation's children to be ready")
    with pytest.raises(queue.Empty):
        results.next(timeout=0.5)  # exactly one settlement for the old attempt


def test_thread_executor_restart_keeps_old_callbacks_away_from_the_new_generation() -> None:
    ex = ThreadExecutor()
    ex.start(1)
    results = Results()
    job = _job("k")
    release_old, release_new = threading.Event(), threading.Event()
    ex.submit(_attempt(lambda ctx: release_old.wait(10) and "old", job), results)

    ex.restart("test")
    abandoned = results.next()
    # the same job, resubmitted to the new generation
    ex.submit(_attempt(lambda ctx: release_new.wait(10) and "new", job), results)
    release_old.set()  # the old attempt finishes late

    with pytest.raises(queue.Empty):
        results.next(timeout=0.5)
    assert ex.free == 0  # the late completion freed nothing of the new generation
    release_new.set()
    fresh = results.next()
    ex.shutdown(wait=1.0)

    assert abandoned[1].status == "abandoned"
    assert "executor restarted" in (abandoned[1].error or "")
    assert fresh[1].status == "succeeded"
    assert fresh[1].result_json == '"new"'


def test_a_worker_on_the_process_executor_fails_a_segfault_and_goes_on(
    tmp_path: Path,
) -> None:
    engine = Engine(MemoryStore(), policy=Policy(lease=LeasePolicy(ttl=2, heartbeat_interval=0.2)))
    worker = Worker(
        engine,
        app.handlers,
        executor=ProcessExecutor(),
        concurrency=2,
        poll_interval=0.05,
        install_signals=False,
        identity=Identity(),
    )
    crash = engine.submit("segfault", {"dir": str(tmp_path)}, max_attempts=1)
    fine = [engine.submit("sleep", {"dir": str(tmp_path), "first": 0}) for _ in range(4)]
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: engine.get(crash.id).state == "failed", 30, "the crash to fail")
        wait_for(lambda: all(engine.get(j.id).state == "succeeded" for j in fine), 30, "the rest")
    finally:
        worker.stop()
        t.join(15)

    assert "SIGSEGV" in (engine.get(crash.id).last_error or "")
    assert not t.is_alive()


def test_a_running_job_that_ignores_cancel_is_killed_after_the_grace_and_acknowledged(
    tmp_path: Path,
) -> None:
    engine = Engine(MemoryStore(), policy=Policy(lease=LeasePolicy(ttl=2, heartbeat_interval=0.2)))
    worker = Worker(
        engine,
        app.handlers,
        executor=ProcessExecutor(),
        concurrency=1,
        poll_interval=0.05,
        cancel_grace=0.5,
        install_signals=False,
        identity=Identity(),
    )
    job = engine.submit("stubborn", {"dir": str(tmp_path), "seconds": 60})
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: markers(tmp_path, job.id, "started"), 30, "start")
        engine.cancel(job.id, actor="ops", reason="stop it")
        asked = time.monotonic()
        wait_for(lambda: engine.get(job.id).state == "cancelled", 10, "cancelled_ack")
        took = time.monotonic() - asked
    finally:
        worker.stop()
        t.join(15)

    events = [e.event for e in engine.history(job.id)]
    assert events[-2:] == ["cancel", "cancelled_ack"]
    assert 0.5 <= took < 5.0  # one heartbeat + the grace + the kill


def test_thread_executor_keeps_serving_after_it_abandons_a_stuck_attempt() -> None:
    ex = ThreadExecutor(stop_grace=0.1)
    ex.start(1)
    results = Results()
    stuck = threading.Event()
    try:
        ex.submit(_attempt(lambda ctx: stuck.wait(10), _job("k"), timeout=0.2), results)
        first = results.next()
        wait_for(lambda: ex.free == 1, 5, "the slot back")
        ex.submit(_attempt(lambda ctx: "next", _job("k")), results)
        second = results.next()
    finally:
        stuck.set()
        ex.shutdown(wait=1.0)

    assert first[1].status == "abandoned"
    assert "did not stop within 0.1s" in (first[1].error or "")
    assert second[1].status == "succeeded"


def test_thread_executor_reports_a_handler_that_stops_at_its_timeout_as_timed_out() -> None:
    ex = ThreadExecutor(stop_grace=2.0)
    ex.start(1)
    results = Results()
    try:
        ex.submit(
            _attempt(lambda ctx: ctx.cancelled.wait(10) and None, _job("k"), timeout=0.2), results
        )
        outcome = results.next()[1]
    finally:
        ex.shutdown(wait=1.0)

    assert outcome.status == "timeout"
    assert "timed out after 0.2s" in (outcome.error or "")


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (None, None),
        ("lease_lost", "LeaseLost"),
        ("bad_input", "BadInput"),
        ("store", "TransientStoreError"),
    ],
)
def test_a_childs_mark_reaches_the_parent_and_its_error_is_raised_in_the_handler(
    procs: ProcessExecutor, failure: str | None, raised: str | None
) -> None:
    from fsm.errors import BadInput, LeaseLost, TransientStoreError

    from . import outside_app

    # given an attempt whose parent-side mark stores, or fails the way a store would
    job = _job("probe", {"external_id": "ext-7"})
    seen: list[tuple[str, str | None]] = []

    def mark(label: str, external_id: str | None) -> None:
        seen.append((label, external_id))
        if failure == "lease_lost":
            raise LeaseLost(job.id, "running", "mark", job.fence, job.fence + 1)
        if failure == "bad_input":
            raise BadInput(f"job {job.id}: too many marks")
        if failure == "store":
            raise TransientStoreError("database is locked")

    token = threading.Event()
    attempt = Attempt(
        job=job,
        timeout=30.0,
        target=handler_path(outside_app.mark_probe),
        job_json=job_to_json(job),
        run=lambda: run_attempt(outside_app.mark_probe, Context(job, token)),
        cancelled=token,
        mark=mark,
    )
    results = Results()

    # when the handler marks in a child process
    procs.submit(attempt, results)
    _, outcome = results.next()

    # then the parent stored it (or failed), and the handler saw exactly that
    assert seen == [("probe", "ext-7")]
    assert outcome.status == "succeeded"
    assert outcome.result_json is not None
    assert json.loads(outcome.result_json)["raised"] == raised
