"""Each start's wait (`jobfsm_queue_wait_seconds{queue}`), fed by the transition hook:
from when the job was due, once per start written, whichever way the start is written."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.clock import FakeClock
from fsm.errors import LeaseLost
from fsm.records import AuditEntry
from fsm.telemetry.metrics import MetricsBase
from fsm.telemetry.observers import wait_seconds

from .helpers import NOW, OWNER, job_in

T0 = 1_700_000_000.0


class Waits(MetricsBase):
    """The waits observed, in order, with their queue."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def queue_wait(self, queue: str, seconds: float) -> None:
        self.seen.append((queue, seconds))


def _engine() -> tuple[Engine, FakeClock, Waits]:
    clock, waits = FakeClock(T0), Waits()
    return Engine(MemoryStore(), clock=clock, metrics=waits), clock, waits


def _no_args(job: Any) -> dict[str, Any]:
    return {}


def test_a_claim_and_start_observes_one_wait_per_start_not_per_lease() -> None:
    # given two jobs of queue "mail" submitted at T0, one to run at T0 + 30
    engine, clock, waits = _engine()
    now = engine.submit("k", {}, queue="mail")
    later = engine.submit("k", {}, queue="mail", run_after=T0 + 30.0)
    clock.advance(40.0)

    # when one claim leases and starts both (the worker's claim-and-start)
    started = engine.claim(OWNER, ("mail",), 2, start=_no_args)

    # then one wait each: 40 s since its submit, 10 s since its run_after
    assert {j.id for j in started} == {now.id, later.id}
    assert sorted(waits.seen) == [("mail", 10.0), ("mail", 40.0)]


def test_a_start_after_a_plain_lease_is_observed_at_the_start_not_at_the_lease() -> None:
    engine, clock, waits = _engine()
    job = engine.submit("k", {}, queue="reports")
    clock.advance(5.0)
    (leased,) = engine.claim(OWNER, ("reports",), 1)
    assert waits.seen == []  # a lease alone starts nothing

    clock.advance(2.0)
    engine.start(job.id, leased.fence)

    assert waits.seen == [("reports", 7.0)]


def test_a_stale_start_is_rejected_and_not_observed() -> None:
    engine, _, waits = _engine()
    job = engine.submit("k", {})
    (leased,) = engine.claim(OWNER, ("default",), 1)

    with pytest.raises(LeaseLost):
        engine.start(job.id, leased.fence + 1)

    assert waits.seen == []


def test_a_job_due_before_its_submit_waits_from_its_submit() -> None:
    engine, clock, waits = _engine()
    engine.submit("k", {}, run_after=T0 - 3600.0)
    clock.advance(3.0)

    engine.claim(OWNER, ("default",), 1, start=_no_args)

    assert waits.seen == [("default", 3.0)]


def test_a_start_stamped_before_the_job_was_due_waited_nothing() -> None:
    # the submitter's clock ahead of the worker's: the start seems to come first
    job = job_in("running", created_at=NOW, run_after=NOW)
    entry = AuditEntry(job.id, 6, NOW - 0.5, "start", "leased", "running", 2, 1)

    assert wait_seconds(job, entry) == 0.0
