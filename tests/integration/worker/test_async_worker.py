"""`async def` handlers in real `jobfsm worker --app` processes, on SQLite and PostgreSQL.

The worker picks the asyncio executor by itself (`--executor auto`): one event
loop per process, many tasks on it, sync handlers of the same registry on threads.
Timings are small (lease TTL 3 s, heartbeat 0.5 s, sweep 0.5 s).
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine

from .async_app import handlers
from .helpers import Workers, engine_factory, freeze, markers, wait_for

APP = "tests.integration.worker.async_app:handlers"


@pytest.fixture
def engine_for() -> Iterator[Callable[[str], Engine]]:
    yield from engine_factory(handlers)


def start(workers: Workers, url: str, **kw: Any) -> subprocess.Popen[bytes]:
    return workers.start(url, app=APP, executor="auto", **kw)


def test_async_and_sync_handlers_run_in_one_worker_with_every_outcome(
    store_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: 30 async jobs that each await 1 s, a sync job, and one job per outcome
    engine = engine_for(store_url)
    naps = [engine.submit("nap", {"dir": str(marks), "first": 1.0, "echo": i}) for i in range(30)]
    sync = engine.submit("sync_echo", [1, 2])
    outcomes = {
        how: engine.submit("outcome", {"how": how})
        for how in ("ok", "retry", "permanent", "ambiguous", "crash")
    }

    # when: one worker with concurrency 40 runs them
    began = time.monotonic()
    start(workers, store_url, concurrency=40)
    finished = [engine.wait(j.id, timeout=30) for j in naps]
    took = time.monotonic() - began

    # then: the naps ran at once on the event loop of one process
    assert all(j.state == "succeeded" for j in finished)
    assert sorted(j.result["echo"] for j in finished) == list(range(30))
    assert len({j.result["pid"] for j in finished}) == 1
    assert took < 15  # 30 s if they had run one at a time
    # and the sync handler ran beside them; each outcome maps as it does for threads
    assert engine.wait(sync.id, timeout=10).result == {"sync": [1, 2]}
    ends = {how: engine.wait(j.id, timeout=20) for how, j in outcomes.items()}
    assert (ends["ok"].state, ends["ok"].result) == ("succeeded", "fine")
    assert ends["retry"].state == "failed"
    assert ends["retry"].attempt == 2
    assert "Retry" in (ends["retry"].last_error or "")
    assert ends["permanent"].state == "failed"
    assert ends["permanent"].attempt == 1
    assert "no such account" in (ends["permanent"].last_error or "")
    assert ends["ambiguous"].state == "investigate"
    assert ends["crash"].state == "failed"
    assert "RuntimeError: boom" in (ends["crash"].last_error or "")


def test_an_operator_cancel_cancels_the_running_task(
    store_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: an async job awaiting for a minute
    engine = engine_for(store_url)
    job = engine.submit("nap", {"dir": str(marks), "first": 60})
    start(workers, store_url)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "the job to start")

    # when: an operator cancels it
    engine.cancel(job.id, actor="ops", reason="not needed")

    # then: the handler sees CancelledError at its await and the job is cancelled,
    # its latest progress kept as the partial result
    done = engine.wait(job.id, timeout=10)
    assert done.state == "cancelled"
    assert done.result == {"step": "waiting", "seconds": 60}
    assert markers(marks, job.id, "cancelled", 1)
    assert not markers(marks, job.id, "done", 1)


def test_a_timeout_cancels_the_task_and_fails_the_attempt(
    store_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: an async job with a 0.5 s timeout that awaits for a minute
    engine = engine_for(store_url)
    job = engine.submit("nap_short", {"dir": str(marks), "first": 60})

    # when: a worker runs it
    start(workers, store_url)

    # then: its task is cancelled at the timeout and the attempt fails as timed out
    done = engine.wait(job.id, timeout=20)
    assert done.state == "failed"
    assert "timed out after 0.5s" in (done.last_error or "")
    assert markers(marks, job.id, "cancelled", 1)


def test_a_task_that_swallows_cancellation_is_abandoned_and_left_to_recovery(
    sqlite_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: an async handler that ignores every cancellation, with a 0.5 s timeout
    engine = engine_for(sqlite_url)
    job = engine.submit("deaf", {"dir": str(marks), "seconds": 6})

    # when: a worker runs it past its timeout and the stop grace (1 s)
    w = start(workers, sqlite_url)

    # then: the worker abandons it (its cancellation was seen, and ignored) and recovery
    # takes the job back: it never stays leased to a task nobody can stop
    wait_for(lambda: markers(marks, job.id, "ignored", 1), 20, "the task to ignore a cancel")
    wait_for(lambda: engine.get(job.id).recoveries >= 1, 20, "recovery of the abandoned job")
    log = workers.log_of(w)
    assert "async attempt abandoned" in log
    assert "did not stop within" in log


def test_a_handler_blocking_the_loop_past_the_lease_ttl_keeps_its_lease_and_is_reported(
    store_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: a handler that blocks the event loop for 5 s, twice the lease TTL (2 s),
    # beside an async job that awaits 1 s on the same loop
    engine = engine_for(store_url)
    blocked = engine.submit("blocker", {"dir": str(marks), "seconds": 5})
    w = start(workers, store_url, ttl=2.0, heartbeat=0.4)
    wait_for(lambda: markers(marks, blocked.id, "started", 1), 20, "the blocker to start")
    neighbour = engine.submit("nap", {"dir": str(marks), "first": 1.0})

    # when: both finish
    done = engine.wait(blocked.id, timeout=30)
    other = engine.wait(neighbour.id, timeout=30)

    # then: heartbeats (on their own thread) kept the lease: no recovery, first fence
    assert done.state == "succeeded"
    assert done.result == {"fence": 1}
    assert done.recoveries == 0
    assert done.attempt == 1
    assert other.state == "succeeded"  # stalled while the loop was blocked, then ran
    # and the stall is not silent: the worker logged it, naming the stalled jobs
    log = workers.log_of(w)
    assert "event loop blocked" in log
    assert "leases are still renewed" in log


def test_sigkill_during_async_jobs_reruns_the_safe_one_and_parks_the_unsafe_one(
    store_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: worker A runs a retry-safe and a retry-unsafe async job (lease TTL 30 s)
    engine = engine_for(store_url)
    safe = engine.submit("nap", {"dir": str(marks), "first": 60, "then": 0})
    unsafe = engine.submit("nap_unsafe", {"dir": str(marks), "first": 60})
    a = start(workers, store_url, ttl=30.0)
    wait_for(lambda: markers(marks, safe.id, "started", 1), 20, "A to start the safe job")
    wait_for(lambda: markers(marks, unsafe.id, "started", 1), 20, "A to start the unsafe job")
    b = start(workers, store_url, ttl=30.0)
    workers.wait_serving(b)

    # when: A is killed with SIGKILL
    workers.kill9(a)

    # then: exactly as for thread jobs, B re-runs the safe one, the unsafe one is parked
    rerun = engine.wait(safe.id, timeout=15)
    assert rerun.state == "succeeded"
    assert rerun.recoveries == 1
    assert rerun.attempt == 2
    parked = engine.wait(unsafe.id, timeout=15)
    assert parked.state == "investigate"
    assert f"pid {a.pid} is gone" in (parked.last_error or "")
    assert not markers(marks, unsafe.id, "started", 2)


def test_a_zombie_async_workers_late_report_is_refused(
    store_url: str,
    workers: Workers,
    marks: Path,
    engine_for: Callable[[str], Engine],
    tmp_path: Path,
) -> None:
    # given: async worker A awaits 2 s before writing a fenced effect
    engine = engine_for(store_url)
    effects = tmp_path / "effects.db"
    job = engine.submit("effect", {"dir": str(marks), "wait": 2.0, "effects_db": str(effects)})
    a = start(workers, store_url, ttl=3.0, heartbeat=0.5)
    wait_for(lambda: engine.get(job.id).state == "running", 20, "A to start the job")

    # when: A is frozen (SIGSTOP) past its lease while B re-runs the job
    freeze(a, store_url)
    try:
        b = start(workers, store_url, ttl=3.0, heartbeat=0.5)
        workers.wait_serving(b)
        wait_for(lambda: engine.get(job.id).state == "succeeded", 20, "B to complete the job")
    finally:
        a.send_signal(signal.SIGCONT)

    # A wakes up: either its heartbeat finds the lease taken first and cancels the task
    # (no stale effect is even tried), or the task runs on, its effect is refused by
    # the fence and its report by the engine
    def a_acted() -> bool:
        rejected = any(e.outcome == "rejected" for e in engine.history(job.id))
        return rejected or "lease lost" in workers.log_of(a)

    wait_for(a_acted, 10, "A to notice it lost the job")
    time.sleep(1.0)

    # then: the effect committed once, under B's fence; A changed nothing
    with sqlite3.connect(effects) as conn:
        rows = conn.execute("SELECT fence, commits, pid FROM effects").fetchall()
    done = engine.get(job.id)
    assert rows == [(2, 1, b.pid)]
    assert done.result == {"written": 1, "fence": 2}
    assert done.fence == 2
    assert not markers(marks, job.id, "effect1", 1)  # A never wrote
    stale = [e for e in engine.history(job.id) if e.outcome == "rejected"]
    a_log = workers.log_of(a)
    assert [(e.event, e.fence) for e in stale] == [("succeed", 1)] or "lease lost" in a_log


def test_sigterm_drains_the_async_jobs_in_flight(
    sqlite_url: str, workers: Workers, marks: Path, engine_for: Callable[[str], Engine]
) -> None:
    # given: a worker with 20 async jobs in flight, each awaiting 1.5 s
    engine = engine_for(sqlite_url)
    jobs = [engine.submit("nap", {"dir": str(marks), "first": 1.5}) for _ in range(20)]
    w = start(workers, sqlite_url, concurrency=20)
    wait_for(lambda: len(list(marks.glob("*.started.*"))) == 20, 20, "all 20 to start")

    # when: it gets SIGTERM
    w.send_signal(signal.SIGTERM)

    # then: it lets them finish, reports them and exits cleanly
    assert w.wait(timeout=20) == 0
    assert all(engine.get(j.id).state == "succeeded" for j in jobs)


def test_an_async_handler_marks_on_the_asyncio_executor_within_the_bound(
    store_url: str, workers: Workers, engine_for: Callable[[str], Engine]
) -> None:
    # given an async handler that marks 20 times, past the bound of 16 per attempt
    engine = engine_for(store_url)
    job = engine.submit("marked", {"n": 20})

    # when a worker runs it on its event loop
    start(workers, store_url)
    done = engine.wait(job.id, timeout=30)

    # then 16 marks were stored in order, the 17th was refused in the handler
    assert done.state == "succeeded"
    assert "most an attempt may record (16)" in done.result["refused"]
    marks = [e for e in engine.history(job.id) if e.event == "mark"]
    assert [e.data["external_id"] for e in marks] == [f"ext-{i}" for i in range(16)]
    assert {(e.code, e.fence, e.attempt) for e in marks} == {("mark", done.fence, 1)}
    assert done.marks == 16
