"""The asyncio executor with a real event loop and real threads; async handlers on the
thread and process executors in real worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.asyncio_executor import AsyncioExecutor
from adapters.memory import MemoryStore
from fsm import Engine, open_store
from fsm.ports import Attempt, ExecutorFull, Outcome
from fsm.records import Job
from fsm.service.identity import Identity
from fsm.worker.context import Context, handler_path, run_attempt, run_attempt_async

from .async_app import handlers
from .helpers import Workers, markers, wait_for

APP = "tests.integration.worker.async_app:handlers"


def _job(kind: str = "k") -> Job:
    engine = Engine(MemoryStore())
    engine.submit(kind, None)
    (leased,) = engine.claim(Identity().owner, limit=1)
    return engine.start(leased.id, leased.fence)


def _attempt(fn: Callable[[Context], Any], job: Job, timeout: float = 30.0) -> Attempt:
    token = threading.Event()
    ctx = Context(job, token)
    return Attempt(
        job=job,
        timeout=timeout,
        target=handler_path(fn),
        run=lambda: run_attempt(fn, ctx),
        cancelled=token,
        arun=(lambda: run_attempt_async(fn, ctx)) if asyncio.iscoroutinefunction(fn) else None,
    )


class Results:
    def __init__(self) -> None:
        self.q: queue.Queue[tuple[Attempt, Outcome, str]] = queue.Queue()

    def __call__(self, attempt: Attempt, outcome: Outcome) -> None:
        self.q.put((attempt, outcome, threading.current_thread().name))

    def next(self, timeout: float = 10.0) -> tuple[Attempt, Outcome, str]:
        return self.q.get(timeout=timeout)


@pytest.fixture
def ex() -> Iterator[AsyncioExecutor]:
    executor = AsyncioExecutor(stop_grace=0.3)
    executor.start(4)
    try:
        yield executor
    finally:
        executor.shutdown(wait=2.0)


def test_async_attempts_run_as_tasks_on_one_loop_and_sync_ones_on_threads(
    ex: AsyncioExecutor,
) -> None:
    # given: three async attempts and a sync one, four slots
    seen: list[str] = []

    async def work(ctx: Context) -> str:
        seen.append(threading.current_thread().name)
        await asyncio.sleep(0.2)
        return "async"

    go = threading.Event()

    def sync(ctx: Context) -> str:
        seen.append(threading.current_thread().name)
        go.wait(5)
        return "sync"

    results = Results()
    for _ in range(3):
        ex.submit(_attempt(work, _job()), results)
    # then: the slots are one bound for tasks and threads
    assert ex.free == 1
    ex.submit(_attempt(sync, _job()), results)
    with pytest.raises(ExecutorFull):
        ex.submit(_attempt(work, _job()), results)
    go.set()

    # when: they finish
    outs = sorted(results.next()[1].result_json or "" for _ in range(4))

    # then: the async ones ran on the loop's thread, the sync one on a thread of its own
    assert outs == ['"async"', '"async"', '"async"', '"sync"']
    assert seen.count("jobfsm-loop") == 3
    assert len([n for n in seen if n.startswith("jobfsm-thread")]) == 1
    wait_for(lambda: ex.free == 4, 5, "every slot free again")


def test_a_timeout_cancels_the_task_and_reports_timeout(ex: AsyncioExecutor) -> None:
    cleaned = threading.Event()

    async def slow(ctx: Context) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.set()

    results = Results()
    ex.submit(_attempt(slow, _job(), timeout=0.2), results)

    _, outcome, _ = results.next()
    assert outcome.status == "timeout"
    assert "timed out after 0.2s" in (outcome.error or "")
    assert cleaned.is_set()


def test_a_soft_cancel_cancels_the_task_and_a_hard_one_abandons_a_deaf_task(
    ex: AsyncioExecutor,
) -> None:
    async def polite(ctx: Context) -> None:
        await asyncio.sleep(30)

    async def deaf(ctx: Context) -> str:
        for _ in range(40):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)
        return "late"

    results = Results()
    a, b = _job(), _job()
    ex.submit(_attempt(polite, a), results)
    ex.submit(_attempt(deaf, b), results)
    time.sleep(0.1)

    # when: both are cancelled; the deaf one then hard
    ex.cancel(a.id, fence=a.fence)
    ex.cancel(b.id, fence=b.fence)
    first = results.next()
    ex.cancel(b.id, fence=b.fence, hard=True, reason="cancel grace passed")
    second = results.next()

    # then: the polite task ended cancelled; the deaf one was abandoned, its late result dropped
    assert (first[0].job.id, first[1].status) == (a.id, "cancelled")
    assert (second[0].job.id, second[1].status) == (b.id, "abandoned")
    with pytest.raises(queue.Empty):
        results.next(timeout=2.5)


def test_restart_abandons_the_tasks_in_flight_and_drops_their_late_results(
    ex: AsyncioExecutor,
) -> None:
    release = threading.Event()

    async def waits(ctx: Context) -> str:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores the restart: ends late
                await asyncio.sleep(0.02)
        return "old"

    results = Results()
    ex.submit(_attempt(waits, _job()), results)
    ex.restart("every lease lost")
    _, abandoned, _ = results.next()
    release.set()

    assert abandoned.status == "abandoned"
    assert "executor restarted" in (abandoned.error or "")
    with pytest.raises(queue.Empty):
        results.next(timeout=0.5)
    assert ex.generation == 1


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_an_async_handler_runs_and_times_out_on_the_thread_and_process_executors(
    sqlite_url: str, workers: Workers, marks: Path, executor: str
) -> None:
    # given: an async job that finishes and one that runs past its 0.5 s timeout
    engine = Engine(open_store(sqlite_url), kinds={k: s.policy for k, s in handlers.items()})
    try:
        ok = engine.submit("nap", {"dir": str(marks), "first": 0.1, "echo": "x"})
        late = engine.submit("nap_short", {"dir": str(marks), "first": 60})

        # when: a worker on that executor runs them
        workers.start(sqlite_url, app=APP, executor=executor)

        # then: each attempt got a loop of its own; the timeout cancelled the task
        assert engine.wait(ok.id, timeout=30).result["echo"] == "x"
        timed_out = engine.wait(late.id, timeout=30)
        assert timed_out.state == "failed"
        assert "timed out" in (timed_out.last_error or "")
        if executor == "thread":  # a process executor kills the child: no clean-up runs
            wait_for(lambda: markers(marks, late.id, "cancelled", 1), 5, "the task's clean-up")
    finally:
        engine.store.close()


def test_a_handler_blocking_the_loop_past_its_timeout_is_abandoned_from_outside_the_loop(
    ex: AsyncioExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    # given: a handler that blocks the loop for 3 s, with a 0.2 s timeout (grace 0.3 s)
    async def blocks(ctx: Context) -> str:
        time.sleep(3)
        return "late"

    results = Results()
    ex.block_warning = 0.5
    began = time.monotonic()
    ex.submit(_attempt(blocks, _job(), timeout=0.2), results)

    # when / then: the watchdog abandons it while the loop is still blocked, and says why
    _, outcome, _ = results.next()
    assert outcome.status == "abandoned"
    assert "did not stop within 0.3s" in (outcome.error or "")
    assert time.monotonic() - began < 2.5
    wait_for(lambda: "event loop blocked" in caplog.text, 3, "the blocked-loop warning")
    # and the late result is dropped once the loop turns again
    with pytest.raises(queue.Empty):
        results.next(timeout=1.5)
