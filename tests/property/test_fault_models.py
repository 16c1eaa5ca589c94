"""The fault models beside the main machine (fsm/testing/faults_models.py) at CI's
quick size, against every store, and what `run_faults` reports about them."""

from __future__ import annotations

import pytest

from fsm.lifecycle.spec import lifecycle
from fsm.testing.faults import FLAKY_TEXT, MODELS, SIZES, explained, run_faults
from fsm.testing.faults_machine import FaultStats

MODEL_NAMES = [m.name for m in MODELS]


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_each_fault_model_holds_on_the_memory_store(model: str) -> None:
    # given the reference store; when one model runs at the quick size; then all holds
    report = run_faults("memory://", size="quick", models=[model], machine=False)
    assert report.ok, report.failure
    assert model in report.models


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_each_fault_model_holds_on_sqlite(model: str) -> None:
    report = run_faults("sqlite:///scratch.db", size="quick", models=[model], machine=False)
    assert report.ok, report.failure
    assert not any("crash model not run" in n for n in report.notes)


@pytest.mark.postgres
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_each_fault_model_holds_on_postgres(model: str, pg_url: str) -> None:
    report = run_faults(pg_url, size="quick", models=[model], machine=False)
    assert report.ok, report.failure
    assert not any("crash model not run" in n for n in report.notes)


def test_the_crash_model_says_when_a_store_has_no_statements_to_crash() -> None:
    report = run_faults("memory://", size="quick", models=["crash"], machine=False)
    assert report.ok
    assert any("crash model not run" in n for n in report.notes)


@pytest.mark.slow  # a whole quick run on SQLite (each model alone runs in the fast tier)
def test_the_report_counts_checks_per_promise_and_the_spec_pairs_reached() -> None:
    # when the whole suite runs at the quick size on SQLite
    report = run_faults("sqlite:///scratch.db", size="quick")
    # then every model ran, each promise family was checked, and coverage names every pair
    assert report.ok, report.failure
    assert set(report.models) == {"machine", *MODEL_NAMES}
    promises = ("P1-P6", "R1", "R3", "V1", "C1", "K1", "K3", "X1", "I1", "Q1", "Q3")
    for code in (*promises, "E1", "E2", "E3", "E4"):
        assert any(name.startswith(code) for name in report.checks), code
    assert set(report.coverage) == {f"{s}/{e}" for s, e in lifecycle().table}
    assert sum(1 for n in report.coverage.values() if n["decide"]) >= len(report.coverage) * 2 // 3
    assert sum(1 for n in report.coverage.values() if n["store"]) >= len(report.coverage) // 2
    assert report.size == "quick"
    assert report.examples >= SIZES["quick"][0]


@pytest.mark.parametrize("url", ["memory://", "sqlite:///scratch.db"])
def test_the_commits_model_says_when_a_store_has_no_connection_to_break(url: str) -> None:
    report = run_faults(url, size="quick", models=["commits"], machine=False)
    assert report.ok
    assert any("commits model not run" in n for n in report.notes)


@pytest.mark.postgres
def test_the_commits_model_breaks_connections_before_and_after_commit_on_both_paths(
    pg_url: str,
) -> None:
    # when the commits model runs at its default size on PostgreSQL
    report = run_faults(pg_url, size="default", models=["commits"], machine=False)
    # then it broke connections before and after statements, blocking and async
    assert report.ok, report.failure
    broken = [f for f in report.faults if f.startswith("connection broken")]
    assert any("after COMMIT" in f for f in broken), broken
    assert any("(async " in f for f in broken), broken
    assert any(f.startswith("connection broken after") and "(sync" in f for f in broken)
    assert report.checks["U1 an answered write is what the store holds (connection broken)"]


def test_a_flaky_report_is_explained_in_words() -> None:
    from hypothesis.errors import FlakyFailure

    err = FlakyFailure("Inconsistent results", [AssertionError("I1 job x: held twice")])
    text = explained(err)
    assert text.startswith(FLAKY_TEXT)
    assert "I1 job x: held twice" in text
    assert "Inconsistent results" not in text


def test_failures_in_explicit_examples_name_each_promise() -> None:
    # hypothesis reports failures of several explicit examples as one ExceptionGroup
    err = ExceptionGroup(
        "Hypothesis found 2 distinct failures in explicit examples.",
        [
            AssertionError("L1 after claim(limit=10), 2 jobs hold a slot\nmore detail"),
            AssertionError("L2 3 leases of kind:rated within 1.0 s"),
        ],
    )
    text = explained(err)
    assert "AssertionError: L1 after claim(limit=10), 2 jobs hold a slot" in text
    assert "AssertionError: L2 3 leases of kind:rated within 1.0 s" in text
    assert "more detail" not in text
    assert "\n" not in text


def test_inconsistent_data_generation_is_explained_as_no_failure_found() -> None:
    from hypothesis.errors import FlakyStrategyDefinition

    text = explained(FlakyStrategyDefinition("Inconsistent data generation!"))
    assert "Nothing was found broken" in text
    assert "Inconsistent data generation" not in text


def test_fault_stats_start_empty() -> None:
    assert FaultStats().checks == {}


def test_the_transactions_model_checks_commit_rollback_and_drop_and_says_when_it_cannot() -> None:
    # given SQLite, whose store joins a caller's transaction (sqlite3 and SQLAlchemy)
    report = run_faults(
        "sqlite:///scratch.db", size="quick", models=["transactions"], machine=False
    )
    # then the jobs of each caller's transaction were checked against its ending
    assert report.ok, report.failure
    assert any(name.startswith("J1 ") for name in report.checks)
    assert any(name.startswith("J2 ") for name in report.checks)
    assert any("(session)" in fault for fault in report.faults)
    # and a memory store, which joins no transaction, is named as not exercised
    memory = run_faults("memory://", size="quick", models=["transactions"], machine=False)
    assert any("transactions model not run" in n for n in memory.notes)


def test_the_limits_retention_and_payloads_models_reach_their_paths_on_memory() -> None:
    # when the three models run at the quick size on the memory store
    report = run_faults(
        "memory://", size="quick", models=["limits", "retention", "payloads"], machine=False
    )
    # then every promise held, and the paths the outside study found unreached are run:
    # a worker's cap checked with what it holds, a waiting job's prerequisites kept, and
    # typed payloads given as instances (well typed or not)
    assert report.ok, report.failure
    assert report.checks["L5 a worker's cap holds with the jobs it already holds"]
    assert report.checks["G5 a prerequisite of a waiting job is never pruned"]
    assert report.faults["retention: a job waits on a finished and an unfinished one"]
    assert report.faults["payloads: an instance that fits"]
    assert report.faults["payloads: an instance that does not fit"]
