"""PostgreSQL apply of a batch: only the changed columns, sent as one JSON parameter."""

from __future__ import annotations

import math

import attrs
import pytest

from adapters.postgres import open_store
from fsm.clock import FakeClock
from fsm.errors import BadInput, VersionConflict
from fsm.lifecycle.core import decide
from fsm.records import Decision, Job, Owner
from fsm.service.engine import Engine

pytestmark = pytest.mark.postgres

OWNER = Owner("host-a", 1, "inc-a")


def _leased(url: str, n: int) -> tuple[Engine, list[Job]]:
    engine = Engine(open_store(url), clock=FakeClock())
    engine.submit_many([("k", i, {}) for i in range(n)])
    return engine, engine.claim(OWNER, limit=n)


def _starts(engine: Engine, jobs: list[Job]) -> list[Decision]:
    now = engine.clock.now()
    return [decide(j, "start", now, engine.policy, fence=j.fence) for j in jobs]


def test_a_batch_of_starts_stores_each_decided_record_and_its_audit_entry(pg_url: str) -> None:
    engine, jobs = _leased(pg_url, 3)
    try:
        decisions = _starts(engine, jobs)
        assert engine.store.apply(decisions) == [d.job for d in decisions]
        for d in decisions:
            assert engine.get(d.job.id) == d.job
            assert engine.history(d.job.id)[-1] == d.entry
    finally:
        engine.store.close()


def test_a_stale_decision_in_a_batch_is_a_conflict_and_the_others_apply(pg_url: str) -> None:
    engine, jobs = _leased(pg_url, 3)
    try:
        engine.heartbeat(OWNER, {jobs[1].id: jobs[1].fence})  # version moves on
        decisions = _starts(engine, jobs)
        out = engine.store.apply(decisions)
        assert out[0] == decisions[0].job
        assert out[2] == decisions[2].job
        assert isinstance(out[1], VersionConflict)
        assert engine.get(jobs[1].id).state == "leased"
        assert [e.event for e in engine.history(jobs[1].id)] == ["submit", "lease"]
    finally:
        engine.store.close()


def test_a_batch_whose_decisions_change_different_columns_is_applied_whole(
    pg_url: str,
) -> None:
    engine, jobs = _leased(pg_url, 2)
    try:
        started = engine.report_many([(jobs[0], "start", {"fence": jobs[0].fence})])
        assert isinstance(started[0], Job)
        now = engine.clock.now()
        decisions = [
            decide(started[0], "succeed", now, engine.policy, fence=jobs[0].fence),
            decide(jobs[1], "start", now, engine.policy, fence=jobs[1].fence),
        ]
        assert engine.store.apply(decisions) == [d.job for d in decisions]
        assert [engine.get(j.id) for j in jobs] == [d.job for d in decisions]
    finally:
        engine.store.close()


def test_a_batch_with_a_non_finite_time_is_bad_input_and_changes_nothing(pg_url: str) -> None:
    engine, jobs = _leased(pg_url, 2)
    try:
        decisions = _starts(engine, jobs)
        decisions[1] = attrs.evolve(
            decisions[1], job=attrs.evolve(decisions[1].job, deadline=math.inf)
        )
        with pytest.raises(BadInput, match="deadline"):
            engine.store.apply(decisions)
        assert [engine.get(j.id) for j in jobs] == jobs
    finally:
        engine.store.close()


def test_a_batch_with_a_value_postgresql_cannot_store_is_bad_input_and_changes_nothing(
    pg_url: str,
) -> None:
    engine, jobs = _leased(pg_url, 2)
    try:
        decisions = _starts(engine, jobs)
        raw = attrs.evolve(decisions[1], job=attrs.evolve(decisions[1].job, last_error="NUL \x00"))
        with pytest.raises(BadInput, match="PostgreSQL rejected"):
            engine.store.apply([decisions[0], raw])
        assert [engine.get(j.id) for j in jobs] == jobs
    finally:
        engine.store.close()
