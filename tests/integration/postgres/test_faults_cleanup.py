"""A `jobfsm faults` run on PostgreSQL works in a scratch schema of its own and drops it
on every way out, a failed run included (docs/fault-suites.md): a run that failed
once left its schema (626 jobs) behind on a shared server."""

from __future__ import annotations

import psycopg
import pytest

from fsm import Engine
from fsm.testing.faults import fresh_stores

pytestmark = pytest.mark.postgres


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'jobfsm_faults_%'"
        ).fetchall()
    return {r[0] for r in rows}


class _ModelFailed(Exception):
    pass


def _failing_run(server: str, url: str, made: set[str]) -> None:
    """A run on `url` that writes jobs in its fresh stores, then fails (an invariant
    broke); `made` gets the schemas that appeared on `server` meanwhile."""
    before = _schemas(server)
    with fresh_stores(url) as opener:
        store = opener()
        made |= _schemas(server) - before
        Engine(store).submit_many([("k", {"n": i}, {}) for i in range(20)])
        assert sum(Engine(opener()).counts().values()) == 20
        raise _ModelFailed("an invariant broke")


def test_a_faults_run_that_fails_midway_drops_the_schema_it_made(pg_url: str) -> None:
    # given a run's fresh stores on a new scratch schema, with jobs written in it
    before = _schemas(pg_url)
    made: set[str] = set()
    # when the model fails midway
    with pytest.raises(_ModelFailed):
        _failing_run(pg_url, pg_url, made)
    # then it had worked in one schema of its own, and that schema is gone
    assert len(made) == 1
    assert _schemas(pg_url) == before


def test_a_faults_run_on_a_named_schema_drops_only_that_schema(pg_url: str) -> None:
    # given another schema on the server that the run did not make
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA jobfsm_faults_not_mine")
    try:
        # when a run on its own named schema fails
        made: set[str] = set()
        with pytest.raises(_ModelFailed):
            _failing_run(pg_url, f"{pg_url}?schema=jobfsm_faults_mine", made)
        # then the run's schema is dropped and the other one kept
        assert made == {"jobfsm_faults_mine"}
        assert _schemas(pg_url) == {"jobfsm_faults_not_mine"}
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS jobfsm_faults_not_mine CASCADE")
