"""The connections of a `jobfsm faults` run on PostgreSQL commit without waiting for the
WAL flush, as its SQLite files are written with `synchronous=NORMAL`: the schema is
scratch (docs/fault-suites.md). A URL that passes libpq `options` keeps its own."""

from __future__ import annotations

import pytest

from fsm.testing.faults import fresh_stores

pytestmark = pytest.mark.postgres


def _synchronous_commit(url: str) -> str:
    with fresh_stores(url) as opener:
        store = opener()
        try:
            with store.connection("test") as conn:  # type: ignore[attr-defined]
                (value,) = conn.execute("SHOW synchronous_commit").fetchone()
        finally:
            store.close()
    return str(value)


def test_a_faults_run_commits_on_postgresql_without_waiting_for_the_flush(pg_url: str) -> None:
    # given / when a run's fresh store on a plain URL
    # then its session does not wait for the WAL flush on commit
    assert _synchronous_commit(pg_url) == "off"


def test_a_faults_run_keeps_the_libpq_options_its_url_passes(pg_url: str) -> None:
    # given a URL that sets libpq options itself
    url = f"{pg_url}?options=--synchronous_commit%3Dlocal"
    # when / then the run's sessions use them, not the scratch default
    assert _synchronous_commit(url) == "local"
