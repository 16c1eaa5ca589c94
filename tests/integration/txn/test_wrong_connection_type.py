"""A `conn=` of the wrong type is refused naming its qualified type (issue 34 item 14)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.errors import BadInput
from fsm.service.connections import type_name


def test_a_psycopg_connection_given_to_the_sqlite_store_is_named_by_its_module(
    tmp_path: Path, pg_url: str
) -> None:
    import psycopg

    # given a SQLite store and a PostgreSQL connection (both classes are named Connection)
    store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    wrong = psycopg.connect(pg_url)
    try:
        # when it is passed as conn= of a submit
        with pytest.raises(BadInput) as raised:
            Engine(store).submit("k", {}, conn=wrong)
        # then the error tells which Connection it got, and nothing is stored
        assert "needs a sqlite3.Connection, got psycopg.Connection" in str(raised.value)
        assert store.counts() == {}
    finally:
        wrong.close()
        store.close()


@pytest.mark.postgres
def test_a_sqlite_connection_given_to_the_postgres_store_is_named_by_its_module(
    pg_url: str,
) -> None:
    # given a PostgreSQL store and a SQLite connection
    store = open_store(pg_url)
    wrong = sqlite3.connect(":memory:")
    try:
        # when it is passed as conn= of a submit
        with pytest.raises(BadInput) as raised:
            Engine(store).submit("k", {}, conn=wrong)
        # then the error names sqlite3.Connection, not a bare "Connection"
        assert "needs a psycopg.Connection, got sqlite3.Connection" in str(raised.value)
        assert store.counts() == {}
    finally:
        wrong.close()
        store.close()


def test_builtin_types_keep_their_bare_name() -> None:
    assert type_name("x") == "str"
    assert type_name(None) == "NoneType"
    conn = sqlite3.connect(":memory:")
    try:
        assert type_name(conn) == "sqlite3.Connection"
    finally:
        conn.close()
