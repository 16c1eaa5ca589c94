"""The `retention` model's step D3 (fsm/testing/faults_retention.py): a dependent
cancelled by an operator lets a pass prune its succeeded prerequisite; requeued, it
must read that prerequisite as gone and end cancelled (docs/dependencies.md,
"Retention"), on every store that leases services."""

from __future__ import annotations

import pytest

from fsm.testing import faults_retention
from fsm.testing.faults import fresh_databases
from fsm.testing.faults_machine import FaultStats
from fsm.testing.faults_models import Coverage, ModelRun

D3 = "D3 a pruned prerequisite counts as failed for its dependent"


def _run(url: str) -> ModelRun:
    """The model's explicit example `ORPHANS`, as its `run` makes it."""
    with fresh_databases(url) as database:
        ctx = ModelRun(database=database, size="quick", stats=FaultStats(), coverage=Coverage())
        faults_retention.run_example(ctx, faults_retention.ORPHANS)
    return ctx


def _judged(ctx: ModelRun) -> tuple[int, int]:
    faults = ctx.stats.faults
    return (
        faults["retention: a requeued orphan judged (1 prerequisites)"],
        faults["retention: a requeued orphan judged (2 prerequisites)"],
    )


@pytest.mark.parametrize("url", ["memory://", "sqlite:///scratch.db"])
def test_a_requeued_dependent_of_a_pruned_prerequisite_is_judged_gone(url: str) -> None:
    # given the explicit example: three dependents cancelled, their succeeded
    # prerequisites past retention; when passes prune them and each dependent is requeued
    ctx = _run(url)
    # then each was judged, alone on the pruned one and beside a queued one, and D3 held
    assert ctx.stats.checks[D3] == 3
    assert _judged(ctx) == (1, 2)


@pytest.mark.postgres
def test_the_same_on_postgresql(pg_url: str) -> None:
    # given PostgreSQL (its prerequisites read is a join of job_deps to jobs)
    ctx = _run(pg_url)
    # then the same three dependents were judged with the pruned ones gone
    assert ctx.stats.checks[D3] == 3
    assert _judged(ctx) == (1, 2)
