"""The `pool` fault model (fsm/testing/faults_pool.py): many failing calls on one
long-lived asyncio store (PostgreSQL's twin), then a call within a bound; it reaches
every way of failing and is refused, by name, on a store without an asyncio twin."""

from __future__ import annotations

import pytest

from fsm.testing import faults_pool
from fsm.testing.faults import fresh_databases, run_faults
from fsm.testing.faults_machine import FaultStats
from fsm.testing.faults_models import Coverage, ModelRun


@pytest.mark.postgres
def test_every_way_of_failing_fires_on_one_store_and_it_stays_live(pg_url: str) -> None:
    # given the explicit example: each way of failing, several times in a row, on one store
    with fresh_databases(pg_url) as database:
        ctx = ModelRun(database=database, size="quick", stats=FaultStats(), coverage=Coverage())
        # when it runs
        faults_pool.run_example(ctx, faults_pool.EVERY_FAILURE)
    # then each way fired, more failures than the pool has turns, and B1, B2 held
    fired = {name.rsplit("(", 1)[-1].rstrip(")") for name in ctx.stats.faults if "failed (" in name}
    assert fired == {"before", "after", "error", "cancel", "crowd"}, ctx.stats.faults
    assert sum(n for name, n in ctx.stats.faults.items() if "failed (" in name) > 2 * 2
    steps = len(faults_pool.EVERY_FAILURE)
    assert ctx.stats.checks["B1 the asyncio store serves a call within the bound"] == steps + 2
    assert ctx.stats.checks["B2 the asyncio pool holds no more than its max"] == steps + 1


def test_a_store_without_an_asyncio_twin_is_reported_not_exercised() -> None:
    # given the memory store; when the pool model is asked for
    report = run_faults("memory://", size="quick", models=["pool"], machine=False)
    # then nothing failed and the summary says the model did not run
    assert report.ok, report.failure
    assert any("pool model not run" in note for note in report.notes), report.notes
