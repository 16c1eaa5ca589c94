"""SQLite specifics: URLs, options, migrations, error translation, query plans."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import attrs
import pytest

from adapters.sqlite import SCHEMA_VERSION, SqliteStore, open_store, parse_url
from adapters.sqlite.url import DEFAULT_BUSY_TIMEOUT_MS
from fsm import Engine, FakeClock, Owner
from fsm.errors import BadStoreURL, SchemaError, StoreError, TransientStoreError
from fsm.ports import ConfirmsDeath
from fsm.registry import open_store as open_by_url

OWNER = Owner("host", 1, "inc")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///relative/jobs.db", "relative/jobs.db"),
        ("sqlite:////abs/path/jobs.db", "/abs/path/jobs.db"),
        ("sqlite://", "jobfsm.db"),
        ("sqlite:///", "jobfsm.db"),
    ],
)
def test_url_paths_are_relative_absolute_or_the_default(url: str, path: str) -> None:
    assert parse_url(url).path == path


def test_url_options_default_to_full_sync_and_five_second_busy_timeout() -> None:
    options = parse_url("sqlite:///x.db")
    assert (options.synchronous, options.busy_timeout_ms) == ("FULL", DEFAULT_BUSY_TIMEOUT_MS)
    options = parse_url("sqlite:///x.db?synchronous=normal&busy_timeout_ms=250")
    assert (options.synchronous, options.busy_timeout_ms) == ("NORMAL", 250)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("sqlite://host/jobs.db", "no host"),
        ("sqlite:///x.db?journal=wal", "'journal'"),
        ("sqlite:///x.db?synchronous=OFF", "synchronous"),
        ("sqlite:///x.db?busy_timeout_ms=-1", "busy_timeout_ms"),
        ("sqlite:///x.db?busy_timeout_ms=9999999", "busy_timeout_ms"),
        ("sqlite:///x.db?synchronous=FULL&synchronous=NORMAL", "twice"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:///dir/", "directory"),
        ("sqlite:///x.db#frag", "fragment"),
        ("postgresql:///x.db", "scheme"),
    ],
)
def test_a_bad_url_is_refused_with_an_error_naming_the_problem(url: str, named: str) -> None:
    with pytest.raises(BadStoreURL, match=named) as info:
        open_store(url)
    # the URL is named as shown everywhere: a fragment (which may hold a secret) masked
    assert url.replace("#frag", "#***") in str(info.value)


def test_a_bad_url_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(BadStoreURL):
        open_store(f"sqlite:///{tmp_path / 'x.db'}?nope=1")
    assert list(tmp_path.iterdir()) == []


def test_the_default_url_creates_jobfsm_db_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite://")
    try:
        assert (tmp_path / "jobfsm.db").exists()
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()


def test_the_registry_opens_sqlite_urls_through_the_entry_point(sqlite_url: str) -> None:
    store = open_by_url(sqlite_url)
    try:
        assert isinstance(store, SqliteStore)
        assert not isinstance(store, ConfirmsDeath)  # leases and pids judge deaths
    finally:
        store.close()


def test_connections_use_wal_and_the_url_options(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'j.db'}?synchronous=NORMAL&busy_timeout_ms=1234")
    try:
        conn = store.thread_connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1234
    finally:
        store.close()
    full = open_store(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        assert full.thread_connection().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        full.close()


def test_each_thread_gets_its_own_connection(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        seen: list[sqlite3.Connection] = []
        t = threading.Thread(target=lambda: seen.append(store.thread_connection()))
        t.start()
        t.join()
        assert seen[0] is not store.thread_connection()
    finally:
        store.close()


# --- migrations ------------------------------------------------------------------


def test_migrations_apply_once_and_are_idempotent(sqlite_url: str) -> None:
    store = SqliteStore(parse_url(sqlite_url))
    try:
        assert store.schema_version() == 0
        assert store.migrate() == list(range(1, SCHEMA_VERSION + 1))
        assert store.migrate() == []
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()
    again = open_store(sqlite_url)
    try:
        assert again.migrate() == []
        rows = again.thread_connection().execute("SELECT version FROM schema_version").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    finally:
        again.close()


def test_migrations_keep_existing_jobs(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    job = Engine(store, clock=FakeClock()).submit("k", {"a": 1})
    store.close()
    again = open_store(sqlite_url)
    try:
        assert again.migrate() == []
        assert again.get(job.id) == job
    finally:
        again.close()


def test_a_file_with_a_newer_schema_is_refused_and_left_unchanged(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    store.thread_connection().execute(
        "INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", (SCHEMA_VERSION + 1,)
    )
    store.close()
    with pytest.raises(SchemaError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        open_store(sqlite_url)
    check = SqliteStore(parse_url(sqlite_url))
    try:
        assert check.schema_version() == SCHEMA_VERSION + 1
    finally:
        check.close()


def test_a_missing_table_is_a_schema_error_naming_the_file(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        store.thread_connection().execute("DROP TABLE job_events")
        with pytest.raises(SchemaError, match="job_events"):
            store.history("x")
    finally:
        store.close()


# --- errors and locking --------------------------------------------------------------


def test_a_held_write_lock_past_the_busy_timeout_is_a_transient_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}?busy_timeout_ms=50"
    store = open_store(url)
    blocker = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientStoreError, match="locked") as info:
            Engine(store, clock=FakeClock()).submit("k", 1)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert info.value.retryable
        blocker.execute("ROLLBACK")
        assert store.counts() == {}
    finally:
        blocker.close()
        store.close()


def test_a_closed_store_refuses_calls(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("x")


def test_a_failed_batch_insert_stores_nothing(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store, clock=FakeClock())
        first = engine.submit("k", 1)
        fresh = engine.kernel.submit_decision(engine.clock.now(), "k", 2)
        clash = engine.kernel.submit_decision(engine.clock.now(), "k", 3)
        clash = attrs.evolve(clash, job=attrs.evolve(clash.job, id=first.id))
        with pytest.raises(StoreError, match="UNIQUE"):
            store.insert([fresh, clash])
        assert store.get(fresh.job.id) is None
        assert store.history(fresh.job.id) == []
        assert store.counts() == {("default", "queued"): 1}
    finally:
        store.close()


def test_the_claim_query_uses_the_partial_due_index(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    try:
        plan = (
            store.thread_connection()
            .execute(
                "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state IN ('queued','retry_wait') "
                "AND queue IN (?) AND run_after <= ? AND (deadline IS NULL OR deadline > ?) "
                "ORDER BY priority, run_after, id LIMIT ?",
                ("default", 1.0, 1.0, 10),
            )
            .fetchall()
        )
        details = " ".join(row[3] for row in plan)
        assert "USING INDEX jobs_due" in details
        assert "TEMP B-TREE" not in details  # the index already gives lease order
    finally:
        store.close()


@pytest.mark.parametrize(
    ("index", "condition"),
    [
        ("jobs_due", "WHERE state IN ('queued','retry_wait')"),
        ("jobs_lease", "WHERE state IN ('cancelling','leased','reconciling','running')"),
        ("jobs_deadline", "WHERE deadline IS NOT NULL AND state IN"),
        ("jobs_idempotency_key", "WHERE idempotency_key IS NOT NULL"),
    ],
)
def test_hot_indexes_are_partial_so_finished_jobs_stay_out(
    sqlite_url: str, index: str, condition: str
) -> None:
    store = open_store(sqlite_url)
    try:
        (sql,) = (
            store.thread_connection()
            .execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index,))
            .fetchone()
        )
        assert condition in " ".join(sql.split())
    finally:
        store.close()
