"""The state names the stores write into SQL and indexes agree with specs/job.toml.

Schema migrations and hot queries spell state sets as literals (an index predicate
must, for the planner to use it). Each literal set is checked here against the set
the spec derives, so a lifecycle change that forgets a store fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path

from adapters.rabbitmq import repair
from adapters.sqlite import schema as sqlite_schema
from fsm.lifecycle.spec import Lifecycle, lifecycle

ROOT = Path(__file__).resolve().parents[2]


def _sources(lc: Lifecycle, event: str) -> set[str]:
    return {src for (src, ev) in lc.table if ev == event}


def _dest(lc: Lifecycle, event: str) -> set[str]:
    return set(lc.dests(event))


def _index_states(sql: str, index: str) -> set[str]:
    # the last definition wins: a later migration may drop and recreate an index
    found = re.findall(rf"CREATE INDEX {index} ON [^;]*?WHERE state IN \(([^)]*)\)", sql, re.S)
    assert found, f"index {index} with a state predicate not found"
    return set(re.findall(r"'([a-z_]+)'", found[-1]))


def test_sqlite_state_sets_are_the_specs() -> None:
    lc = lifecycle()
    assert set(sqlite_schema.CLAIMABLE_STATES) == _sources(lc, "lease")
    assert set(sqlite_schema.LEASED_STATES) == _sources(lc, "expire")
    assert set(sqlite_schema.ACTIVE_STATES) == _sources(lc, "deadline")


def test_postgres_index_predicates_and_claim_are_the_specs() -> None:
    lc = lifecycle()
    schema = (ROOT / "adapters/postgres/migrations.py").read_text(encoding="utf-8")
    assert _index_states(schema, "jobs_due") == _sources(lc, "lease")
    assert _index_states(schema, "jobs_leased") == _sources(lc, "expire")
    queries = (ROOT / "adapters/postgres/_sql.py").read_text(encoding="utf-8")
    written = set(re.findall(r"SET state = '([a-z_]+)'", queries))
    assert written == _dest(lc, "lease")


def test_the_rabbitmq_repair_sweep_looks_at_the_states_jobs_wait_in() -> None:
    lc = lifecycle()
    assert set(repair.WAITING) == _sources(lc, "lease")
    assert lc.create_rule.dest == "queued"  # repair's "never leased yet" test reads it
