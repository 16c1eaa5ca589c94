"""The `pauses` fault model (fsm/testing/faults_pauses.py): engines claim while queues
are paused and resumed; it reaches its paths, runs its explicit examples, and fails
when an engine does not see its own pause or keeps a read older than its change."""

from __future__ import annotations

import time

import pytest

from fsm.service import pausing
from fsm.service.pausing import QueuePauses
from fsm.testing import faults_pauses
from fsm.testing.faults import fresh_databases, run_faults
from fsm.testing.faults_machine import FaultStats
from fsm.testing.faults_models import Coverage, ModelRun

EXPLICIT = {
    "own_pause": faults_pauses.OWN_PAUSE,
    "at_the_bound": faults_pauses.AT_THE_BOUND,
    "raced_read": faults_pauses.RACED_READ,
}


def _run(plan: faults_pauses.Plan, url: str = "memory://") -> ModelRun:
    """One example of the model, as its `run` makes it."""
    with fresh_databases(url) as database:
        ctx = ModelRun(database=database, size="quick", stats=FaultStats(), coverage=Coverage())
        faults_pauses.run_example(ctx, plan)
    return ctx


def test_the_pauses_model_reaches_every_promise_and_the_held_read() -> None:
    # when the model runs at the quick size on the memory store
    report = run_faults("memory://", size="quick", models=["pauses"], machine=False)
    # then it held, checked each promise, and changed pauses while their engine read
    assert report.ok, report.failure
    for code in ("H1/H2", "H3", "H4"):
        assert any(name.startswith(code) and n for name, n in report.checks.items()), code
    assert report.faults["pauses: a pause or resume while its engine reads"]
    assert report.faults["pauses: a queue paused"]
    assert report.faults["pauses: a queue resumed"]


@pytest.mark.parametrize("name", EXPLICIT)
@pytest.mark.parametrize("url", ["memory://", "sqlite:///scratch.db"])
def test_each_explicit_example_holds(name: str, url: str) -> None:
    # given one of the model's explicit examples; when it runs; then every promise holds
    ctx = _run(EXPLICIT[name], url)
    assert ctx.stats.checks["H4 a job no claim returned is unchanged"] == 1


def test_the_model_restores_the_clock_of_the_pausing_module() -> None:
    # when the model ran; then `fsm.service.pausing` reads the real monotonic clock again
    _run(faults_pauses.OWN_PAUSE)
    assert pausing.time is time


def test_an_engine_that_does_not_see_its_own_pause_breaks_h1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given engines that keep their cached pauses after their own pause or resume
    monkeypatch.setattr(QueuePauses, "_changed", lambda self: None)
    # when the example of an engine claiming right after its own pause runs
    with pytest.raises(AssertionError, match=r"^H1 engine 0 leased job .* its own pause"):
        _run(faults_pauses.OWN_PAUSE)


def test_a_read_older_than_its_engines_pause_kept_breaks_h1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given engines whose pause only forgets the cache's time (a read in flight is kept)
    def forget_time(self: QueuePauses) -> None:
        self._read_at = None

    monkeypatch.setattr(QueuePauses, "_changed", forget_time)
    # when the example of a pause while the same engine reads the pauses runs
    with pytest.raises(AssertionError, match=r"^H1 engine 0 leased job"):
        _run(faults_pauses.RACED_READ)
