"""The `waits` fault model (fsm/testing/faults_waits.py): callers wait for outcomes on
the model's clock while jobs move; it reaches its promises and its explicit examples,
and fails when a wait reads too seldom or a store's wake-up does not come."""

from __future__ import annotations

import pytest

from fsm.service import waiting
from fsm.testing import faults_waits
from fsm.testing.faults import fresh_databases, run_faults
from fsm.testing.faults_machine import FaultStats
from fsm.testing.faults_models import Coverage, ModelRun

EXPLICIT = {
    "two_waits_one_leaves": faults_waits.TWO_WAITS_ONE_LEAVES,
    "long_poll": faults_waits.LONG_POLL,
    "outage": faults_waits.OUTAGE,
    "at_the_timeout": faults_waits.AT_THE_TIMEOUT,
}


def _run(plan: faults_waits.Plan, url: str) -> ModelRun:
    """One example of the model, as its `run` makes it."""
    with fresh_databases(url) as database:
        ctx = ModelRun(database=database, size="quick", stats=FaultStats(), coverage=Coverage())
        faults_waits.run_example(ctx, plan)
    return ctx


def test_the_waits_model_checks_each_promise_of_a_polled_wait(sqlite_url: str) -> None:
    # when the model runs at its default size on a store that is polled
    report = run_faults(sqlite_url, size="default", models=["waits"], machine=False)
    # then it held, and checked the answers, the reads, the timeouts and the bad calls
    assert report.ok, report.failure
    for code in ("O1", "O2", "O3", "O4"):
        assert any(name.startswith(code) and n for name, n in report.checks.items()), code
    assert report.faults["waits: a waited job moves, not to a final state"]


@pytest.mark.postgres
def test_on_postgres_it_checks_the_wake_ups_the_watchers_and_an_outage(pg_url: str) -> None:
    # when the model runs at the quick size on PostgreSQL (LISTEN/NOTIFY)
    report = run_faults(pg_url, size="quick", models=["waits"], machine=False)
    # then it held, each wait was woken by the store and held one watcher, and jobs
    # ended while the listener was away
    assert report.ok, report.failure
    for code in ("O2", "O5"):
        assert any(name.startswith(code) and n for name, n in report.checks.items()), code
    assert report.faults["waits: a job ends while the listener is away"]


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_each_explicit_example_holds_on_memory(name: str) -> None:
    ctx = _run(EXPLICIT[name], "memory://")
    assert ctx.stats.examples == 1


def test_a_poll_whose_pauses_outgrow_their_cap_fails_o3(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: polled waits whose pauses double up to 4 s, not the 0.25 s the model holds
    monkeypatch.setattr(waiting, "WAIT_POLL_MAX", 4.0)
    # when: a wait polls for three seconds of the model's clock
    with pytest.raises(AssertionError, match=r"O3 a wait on job .* without reading it"):
        _run(faults_waits.LONG_POLL, "memory://")


def test_a_wait_that_gives_up_early_fails_o4(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: waits whose timeouts are taken as half what the caller gave
    real = waiting.wait_plan

    def hasty(kernel, job_id, limit, *, watched):  # type: ignore[no-untyped-def]
        return real(kernel, job_id, limit / 2, watched=watched)

    monkeypatch.setattr(waiting, "wait_plan", hasty)
    # then: the first wait that times out does so before its timeout
    with pytest.raises(AssertionError, match=r"O4 a wait on job .* before its timeout"):
        _run(faults_waits.LONG_POLL, "memory://")
