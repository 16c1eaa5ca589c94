"""The concurrency model's capacity queue (K4) and the worker model's sweep as its
claim ends (W3): each is checked, and reaches the path it is there for."""

from __future__ import annotations

import pytest

from fsm.testing.faults import run_faults

ASYNC_SUBMITS = "concurrency: racing async submit to a queue of capacity"
SYNC_SUBMITS = "concurrency: racing sync submit to a queue of capacity"


def test_the_worker_model_sweeps_as_its_claim_ends_and_checks_w3() -> None:
    # when the worker model runs at the quick size
    report = run_faults("memory://", size="quick", models=["worker"], machine=False)
    # then every example swept with the worker's own identity as its claim ended
    assert report.ok, report.failure
    assert report.faults["worker: own sweep as its claim ends"] >= 1
    assert any(name.startswith("W3") for name in report.checks)


def test_the_concurrency_model_races_sync_submits_into_a_queue_with_a_capacity() -> None:
    report = run_faults("sqlite:///scratch.db", size="quick", models=["concurrency"], machine=False)
    assert report.ok, report.failure
    assert report.faults[SYNC_SUBMITS] >= 1
    assert ASYNC_SUBMITS not in report.faults  # no asyncio twin: no async submits
    assert any(name.startswith("K4") for name in report.checks)


@pytest.mark.postgres
def test_the_concurrency_model_races_async_submits_on_postgres(pg_url: str) -> None:
    report = run_faults(pg_url, size="quick", models=["concurrency"], machine=False)
    assert report.ok, report.failure
    assert report.faults[ASYNC_SUBMITS] >= 1
    assert report.faults[SYNC_SUBMITS] >= 1
    assert any(name.startswith("K4") for name in report.checks)
