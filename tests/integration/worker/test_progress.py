"""Progress and partial results in real `jobfsm worker` processes, on SQLite and PostgreSQL.

A handler's `ctx.progress(...)` is stored with its job while it runs (on the thread,
process and asyncio executors alike), where this test process, a second Engine on
the same store, reads it; a job cancelled while running ends `cancelled` with the
output its handler returned, or with its latest progress when the handler stopped
without returning. Timings are small: heartbeat 0.2 s, lease TTL 3 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fsm import Engine
from fsm.service.progress import Progress, progress_of

from .helpers import Workers, engine_factory, wait_for
from .progress_app import handlers

APP = "tests.integration.worker.progress_app:handlers"
#: the payload limit (a progress value's JSON may not be longer)
LIMIT = 1024 * 1024


@pytest.fixture
def engine_for() -> Iterator[Callable[[str], Engine]]:
    yield from engine_factory(handlers)


def start(workers: Workers, url: str, executor: str, **kw: Any) -> subprocess.Popen[bytes]:
    kw.setdefault("heartbeat", 0.2)
    proc = workers.start(url, app=APP, executor=executor, **kw)
    workers.wait_serving(proc)
    return proc


def stored_progress(engine: Engine, job_id: str, done: int) -> Progress:
    """Wait until the store holds progress of the job with `done` >= done; return it."""
    found: list[Progress] = []

    def reached() -> bool:
        got = progress_of(engine.get(job_id))
        if got is not None and isinstance(got.value, dict) and got.value.get("done", 0) >= done:
            found.append(got)
            return True
        return False

    wait_for(reached, 30, f"stored progress of job {job_id} to reach {done}")
    return found[-1]


@pytest.mark.parametrize(
    ("executor", "kind"), [("thread", "count"), ("process", "count"), ("asyncio", "acount")]
)
def test_a_cancelled_job_ends_cancelled_with_the_output_its_handler_returned(
    store_url: str,
    workers: Workers,
    engine_for: Callable[[str], Engine],
    executor: str,
    kind: str,
) -> None:
    # given: a worker running a handler that counts and reports each step
    engine = engine_for(store_url)  # this process: another Engine on the worker's store
    job = engine.submit(kind, {"of": 10_000})
    start(workers, store_url, executor)

    # when: its progress shows here while it runs, then an operator cancels it
    first = stored_progress(engine, job.id, 3)
    later = stored_progress(engine, job.id, first.value["done"] + 1)
    running = engine.get(job.id)
    assert running.state == "running"
    assert (later.attempt, later.fence) == (1, running.fence)
    assert [e.event for e in engine.history(job.id)] == ["submit", "lease", "start"]
    engine.cancel(job.id, actor="ops", reason="enough")
    done = engine.wait(job.id, timeout=30)

    # then: it ends cancelled, keeping what the handler returned as its partial result
    assert done.state == "cancelled"
    assert done.result["partial"] is True
    assert done.result["done"] >= later.value["done"]
    last = engine.history(job.id)[-1]
    assert (last.event, last.from_state, last.to_state) == ("succeed", "cancelling", "cancelled")
    # and the handler's last progress was stored before the outcome
    final = progress_of(done)
    assert final is not None
    assert final.value == {"done": done.result["done"], "of": 10_000}


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_handler_stopped_by_a_cancel_leaves_its_latest_progress_as_the_partial_result(
    store_url: str, workers: Workers, engine_for: Callable[[str], Engine], executor: str
) -> None:
    # given: a handler that raises at check_cancelled() after a cancel request
    engine = engine_for(store_url)
    job = engine.submit("count_then_stop")
    start(workers, store_url, executor)
    stored_progress(engine, job.id, 3)

    # when
    engine.cancel(job.id, actor="ops", reason="enough")
    done = engine.wait(job.id, timeout=30)

    # then: cancelled_ack, with the latest progress (from the child, on processes) kept
    assert done.state == "cancelled"
    assert engine.history(job.id)[-1].event == "cancelled_ack"
    assert isinstance(done.result, dict)
    assert done.result["done"] >= 3
    final = progress_of(done)
    assert final is not None
    assert final.value == done.result


def test_a_child_killed_after_the_cancel_grace_leaves_its_last_progress_as_partial_result(
    store_url: str, workers: Workers, engine_for: Callable[[str], Engine]
) -> None:
    # given: a handler in a child process that reports 5 steps, then ignores its token
    engine = engine_for(store_url)
    job = engine.submit("count_then_hang", {"steps": 5})
    start(workers, store_url, "process", cancel_grace=0.5)
    reported = stored_progress(engine, job.id, 5)

    # when: it is cancelled, and killed once the cancel grace has passed
    engine.cancel(job.id, actor="ops", reason="stuck")
    done = engine.wait(job.id, timeout=30)

    # then: the child's last progress, carried to the parent, is the partial result
    assert done.state == "cancelled"
    assert done.result == {"done": 5, "pid": reported.value["pid"]}
    wait_for(lambda: not _alive(reported.value["pid"]), 10, "the child to be gone")


def test_a_child_sigkilled_mid_progress_leaves_the_last_progress_it_stored(
    store_url: str, workers: Workers, engine_for: Callable[[str], Engine]
) -> None:
    # given: a handler in a child process that reported 5 steps and now hangs
    engine = engine_for(store_url)
    job = engine.submit("count_then_hang", {"steps": 5, "then": 30})
    start(workers, store_url, "process")
    reported = stored_progress(engine, job.id, 5)

    # when: its child is SIGKILLed from outside
    os.kill(reported.value["pid"], signal.SIGKILL)

    # then: the attempt fails as crashed and the job runs again; the store still holds
    # attempt 1's last progress (attempt 2 reports none)
    wait_for(lambda: engine.get(job.id).attempt == 2, 30, "the second attempt")
    again = engine.get(job.id)
    kept = progress_of(again)
    assert kept is not None
    assert (kept.attempt, kept.value) == (1, reported.value)
    failed = [e for e in engine.history(job.id) if e.event == "fail"]
    assert failed
    assert "SIGKILL" in (failed[0].error or "")


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_oversized_progress_raises_in_the_handler_and_stores_nothing_of_it(
    store_url: str, workers: Workers, engine_for: Callable[[str], Engine], executor: str
) -> None:
    # given: a handler that reports a small value, then one over the payload limit
    engine = engine_for(store_url)
    job = engine.submit("oversized", {"bytes": LIMIT + 1, "then": 0.5})

    # when
    start(workers, store_url, executor)
    done = engine.wait(job.id, timeout=30)

    # then: the handler got a clear error, went on, and the job succeeded; the store
    # holds the small value only
    assert done.state == "succeeded"
    error = done.result["error"]
    assert f"progress of job {job.id}" in error
    assert f"over the limit of {LIMIT} bytes" in error
    kept = progress_of(done)
    assert kept is not None
    assert kept.value == {"step": "small"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
