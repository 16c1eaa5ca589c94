"""Progress writes that fail, in the `reports` fault model (fsm/testing/faults_reports.py,
E5): the worker writes the latest progress again, so it is stored with its job; a
worker that counts a write as done before the store did it is caught. And how the model
counts a report's failed writes for E3: a report its batch held back counts as tried."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest

from fsm.testing import faults_reports
from fsm.testing.faults import fresh_databases, run_faults
from fsm.testing.faults_machine import FaultStats
from fsm.testing.faults_models import Coverage, ModelRun
from fsm.worker import leases, reports, saving
from fsm.worker.runs import Run
from fsm.worker.state import Shared


def _run(plan: faults_reports.Plan, url: str = "memory://") -> ModelRun:
    """One example of the reports model, as its `run` makes it."""
    with fresh_databases(url) as database:
        ctx = ModelRun(database=database, size="quick", stats=FaultStats(), coverage=Coverage())
        faults_reports.run_plan(ctx, plan)
    return ctx


@pytest.mark.parametrize("url", ["memory://", "sqlite:///scratch.db"])
def test_progress_whose_writes_fail_is_written_again_and_stored(url: str) -> None:
    # given the model's example whose first two progress writes fail
    # when it runs; then each job whose write failed has its latest progress stored
    ctx = _run(faults_reports.PROGRESS_FAILS, url)
    assert ctx.stats.faults["reports: progress writes fail 2"] == 1
    assert ctx.stats.checks["E5 the latest progress is stored though a write of it failed"] >= 1


def test_the_reports_model_draws_progress_write_failures() -> None:
    # when the model runs at the quick size; then its explicit example failed progress writes
    report = run_faults("memory://", size="quick", models=["reports"], machine=False)
    assert report.ok, report.failure
    assert any(name.startswith("E5 ") for name in report.checks)


def test_a_progress_write_counted_as_done_before_the_store_did_it_breaks_e5(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a worker that counts every progress write as done, whatever the store did
    real = saving.save_progress

    def saved_first(s: Shared, runs: Iterable[Run], *, retried: bool = False) -> int:
        runs = list(runs)
        seqs = [(run, run.ctx.latest_progress()[0]) for run in runs]
        try:
            return real(s, runs, retried=retried)
        finally:
            for run, seq in seqs:
                run.progress_saved = seq

    for module in (leases, reports):
        monkeypatch.setattr(module, "save_progress", saved_first)
    # when the example whose progress writes fail runs
    with pytest.raises(AssertionError, match=r"^E5 job .*a write of its progress failed"):
        _run(faults_reports.PROGRESS_FAILS)


def test_a_store_without_progress_gets_no_progress_writes_from_the_wrapper() -> None:
    # given the model's store wrapper around a store that keeps no progress
    class Bare:
        def apply(self, decisions: Any) -> Any:
            return decisions

    path = faults_reports.ReportPath(Bare())  # type: ignore[arg-type]
    # then it adds no save_progress of its own
    assert not hasattr(path, "save_progress")


def test_a_report_held_back_by_its_batch_counts_as_tried_while_the_store_is_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a reporter that gathers the three outcomes into one batch and builds its
    # reports only once the heartbeat has seen the cancel request: the cancelled job's
    # report (`cancelled_ack`) cannot be decided on the record the worker holds, so the
    # engine decides it on the stored record after the batch's first write, which the
    # store fails every time
    monkeypatch.setattr(reports, "BATCH_WINDOW", 2.0)
    real = reports.Reporter.report

    def once_the_cancel_is_seen(self: reports.Reporter, batch: list[Any]) -> None:
        until = time.monotonic() + faults_reports.WAIT
        while time.monotonic() < until and all(r.cancel_seen is None for r, _ in batch):
            time.sleep(0.01)
        real(self, batch)

    monkeypatch.setattr(reports.Reporter, "report", once_the_cancel_is_seen)
    plan: faults_reports.Plan = (
        ["small", "permanent", "cancel_fail"],
        [60.0] * 3,
        "away",
        0,
        [],
        0,
    )
    # when the store stays away past the bound
    ctx = _run(plan)
    # then every job is left to recovery, its report tried for the bound (E3)
    assert ctx.stats.checks["E3 a report past the bound is given up and left to recovery"] == 3
