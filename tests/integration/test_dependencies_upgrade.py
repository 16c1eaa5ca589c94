"""Upgrading a store from the schema before dependencies keeps its jobs and adds them.

A SQLite file at migration 2 and a PostgreSQL schema at migration 3, each holding a
job written by that schema, are opened by this jobfsm: the migrations add schedules,
progress, `job_deps` and `on_failed_dependency`, the old job reads back unchanged (no
rule), and a new job can wait for it.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from adapters.postgres import migrations as pg_schema
from adapters.sqlite import schema as sqlite_schema
from fsm import Engine, open_store
from fsm.records import JOB_FIELDS

#: columns later migrations add (progress_json, on_failed_dependency, marks, reconciler,
#: retry_safe_pinned)
LATER_COLUMNS = (
    "progress_json",
    "on_failed_dependency",
    "marks",
    "reconciler",
    "retry_safe_pinned",
    "unique_key",
)
#: the columns of migration 1
OLD_COLUMNS = [c for c in JOB_FIELDS if c not in LATER_COLUMNS]
OLD_ROW = {
    "id": "01OLDJOB000000000000000000",
    "kind": "k",
    "queue": "default",
    "payload_json": "1",
    "state": "queued",
    "created_at": 1.0,
    "updated_at": 1.0,
    "run_after": 1.0,
    "priority": 0,
    "attempt": 0,
    "max_attempts": 10,
    "recoveries": 0,
    "max_recoveries": 3,
    "retry_safe": True,
    "fence": 0,
    "version": 1,
}


def _old_values() -> list[object]:
    return [OLD_ROW.get(c) for c in OLD_COLUMNS]


def _check_upgraded(url: str) -> None:
    engine = Engine(open_store(url))
    try:
        old = engine.get(OLD_ROW["id"])
        assert (old.state, old.on_failed_dependency) == ("queued", None)
        assert old.retry_safe_pinned is False  # a job from before the pin is not pinned
        waiting = engine.submit("k", 2, after=[old.id])
        assert waiting.state == "waiting"
        engine.cancel(old.id, actor="t", reason="upgrade test")
        assert engine.get(waiting.id).state == "cancelled"
    finally:
        engine.store.close()


def test_a_sqlite_file_from_before_dependencies_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(sqlite_schema.CREATE_VERSION_TABLE)
    for number, statements in sqlite_schema.MIGRATIONS:
        if number >= 3:
            break
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?)", (number, time.time()))
    marks = ", ".join("?" for _ in OLD_COLUMNS)
    conn.execute(f"INSERT INTO jobs ({', '.join(OLD_COLUMNS)}) VALUES ({marks})", _old_values())
    conn.close()
    _check_upgraded(f"sqlite:///{path}")


@pytest.mark.postgres
def test_a_postgresql_schema_from_before_dependencies_is_upgraded(pg_url: str) -> None:
    schema = f"old_{uuid.uuid4().hex[:8]}"
    s = pg_schema.quote(schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, description, text in pg_schema.MIGRATIONS:
            if version >= 4:
                break
            conn.execute(text.replace("{s}", s).encode())
            conn.execute(
                f"INSERT INTO {s}.schema_version (version, description) VALUES (%s, %s)",
                (version, description),
            )
        marks = ", ".join("%s" for _ in OLD_COLUMNS)
        conn.execute(
            f"INSERT INTO {s}.jobs ({', '.join(OLD_COLUMNS)}) VALUES ({marks})", _old_values()
        )
    _check_upgraded(f"{pg_url}?schema={schema}")
