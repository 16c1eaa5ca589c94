"""fsm.service.plans: the service's loops, written once over a kernel, driven blocking
(`drive`) and awaited (`adrive`) by scripted and real (memory store) answers."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from adapters.memory import MemoryStore
from fsm import Engine, FakeClock, LeaseLost, Limits, Policy
from fsm.errors import VersionConflict
from fsm.records import Job
from fsm.service import plans as st
from fsm.service.drivers import perform_sync

from .helpers import OWNER


def _engine(**limits: Any) -> Engine:
    return Engine(MemoryStore(), clock=FakeClock(), policy=Policy(limits=Limits(**limits)))


def test_lost_races_are_retried_at_most_cas_retries_times() -> None:
    # given: a store where every compare-and-set loses
    engine = _engine(cas_retries=3)
    job = engine.submit("k", 1)
    seen: list[str] = []

    def perform(request: st.Request) -> Any:
        seen.append(type(request).__name__)
        if isinstance(request, st.Read):
            return engine.store.get(request.job_id)
        assert isinstance(request, st.Write)
        return VersionConflict(job.id, job.version, job.version + 1)

    # when: an operator cancels the job
    with pytest.raises(VersionConflict):
        st.drive(st.cancel(engine.kernel, job.id, actor="op", reason="r"), perform)

    # then: read and write three times, then give up; nothing was written
    assert seen == ["Read", "Write"] * 3
    assert engine.get(job.id) == job


def test_a_stale_fence_records_the_rejected_report_and_writes_nothing() -> None:
    engine = _engine()
    job = engine.submit("k", 1)
    [leased] = engine.claim(OWNER, ids=[job.id])
    engine.start(job.id, leased.fence)
    requests: list[st.Request] = []

    def perform(request: st.Request) -> Any:
        requests.append(request)
        return perform_sync(engine.kernel)(request)

    with pytest.raises(LeaseLost):
        st.drive(st.decided(engine.kernel, job.id, "succeed", {"fence": leased.fence - 1}), perform)

    assert [type(r).__name__ for r in requests] == ["Read", "Record"]
    [record] = [r for r in requests if isinstance(r, st.Record)]
    assert record.entry.outcome == "rejected"
    assert engine.get(job.id).state == "running"


class BrokenPublisher:
    def publish(self, jobs: Any) -> None:
        raise ConnectionError("broker away")


def test_a_failed_publish_is_logged_and_the_jobs_are_still_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine()
    engine.publisher = BrokenPublisher()
    with caplog.at_level(logging.WARNING, logger="fsm.service.plans"):
        [job] = engine.submit_many([("k", 1, {})])
    assert engine.get(job.id) == job
    assert "publishing 1 new jobs failed" in caplog.text


def test_the_awaited_driver_writes_exactly_what_the_blocking_one_writes() -> None:
    # given: two engines on equal clocks, one driven blocking, one awaited
    blocking, awaited = _engine(), _engine()

    def plan(engine: Engine, job: Job) -> st.Plan[Job]:
        return st.resolve(
            engine.kernel, job.id, outcome="failed", actor="op", reason="r", result=None
        )

    def parked(engine: Engine) -> Job:
        job = engine.submit("k", 1)
        [leased] = engine.claim(OWNER, ids=[job.id])
        engine.start(job.id, leased.fence)
        return engine.ambiguous(job.id, leased.fence, "unknown")

    one, two = parked(blocking), parked(awaited)
    sync = perform_sync(awaited.kernel)

    async def perform(request: st.Request) -> Any:
        await asyncio.sleep(0)
        return sync(request)

    # when: the same operator action goes through each driver
    a = st.drive(plan(blocking, one), perform_sync(blocking.kernel))
    b = asyncio.run(st.adrive(plan(awaited, two), perform))

    # then: the same record and the same audit entry, but for the job's id
    assert (a.state, a.version, a.finished_at) == (b.state, b.version, b.finished_at)
    ea, eb = blocking.history(one.id)[-1], awaited.history(two.id)[-1]
    assert (ea.event, ea.from_state, ea.to_state, ea.actor) == (
        eb.event,
        eb.from_state,
        eb.to_state,
        eb.actor,
    )


def test_a_cancelled_await_unwinds_the_loop() -> None:
    # an awaiting caller cancelled mid-plan: the error reaches the loop, nothing is written
    engine = _engine()
    job = engine.submit("k", 1)

    async def perform(request: st.Request) -> Any:
        if isinstance(request, st.Write):
            await asyncio.sleep(10)
        return perform_sync(engine.kernel)(request)

    async def go() -> None:
        task = asyncio.ensure_future(
            st.adrive(st.cancel(engine.kernel, job.id, actor="op", reason="r"), perform)
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert engine.get(job.id) == job
