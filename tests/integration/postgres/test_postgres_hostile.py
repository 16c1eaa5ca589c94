"""PostgreSQL under hostile input: secrets in URLs, schema names too long for their
LISTEN channel, a NaN time written behind jobfsm's back, a transaction-pooling
proxy in front of the liveness session, schema removal, the capacity count's plan."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from adapters.postgres import open_store, parse
from adapters.postgres._sql import state_list
from adapters.postgres._url import MAX_SCHEMA_LENGTH
from adapters.postgres.migrations import LIVENESS_CLASS
from fsm import Engine, Owner
from fsm.errors import BadInput, BadStoreURL, JobFSMError, StoreError
from fsm.registry import open_store as open_by_url

pytestmark = pytest.mark.postgres

SENTINEL = "S3cr3t-Sentinel"


def _texts(err: BaseException) -> list[str]:
    """str and repr of an error and of every error chained to it."""
    out: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return out


# --- passwords never leak -------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SENTINEL}%zz@127.0.0.1/db",  # a mistyped percent-encoding
        f"postgresql://u@127.0.0.1/db?password={SENTINEL}&schema=BAD",
        f"postgresql://u@127.0.0.1/db?password={SENTINEL}%zz",
        f"postgresql://u@127.0.0.1/db?sslpassword={SENTINEL}&pool_max=0",
        f"postgresql://u:{SENTINEL}@127.0.0.1/db?schema=BAD",
        f"postgresql://u:{SENTINEL}@127.0.0.1/db?x&y",
        f"POSTGRESQL://u:{SENTINEL}@127.0.0.1/db?pool_timeout=nan",
        f"postgresql:u:{SENTINEL}@127.0.0.1/db",  # no "://"
        f"postgresql:/u:{SENTINEL}@127.0.0.1/db",
        f"u:{SENTINEL}@127.0.0.1/db",
        f"postgresql://u:{SENTINEL}@127.0.0.1:1/db",  # nothing listens: a connect error
        f"postgresql://u@127.0.0.1:1/db?password={SENTINEL}",
    ],
)
def test_no_error_or_log_line_about_a_store_url_shows_its_password(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        for opener in (open_store, open_by_url):
            with pytest.raises(JobFSMError) as info:
                opener(url)
            for text in _texts(info.value):
                assert SENTINEL not in text, f"{url} leaked through {text}"
    assert SENTINEL not in caplog.text


def test_settings_show_no_password_in_their_repr_or_their_redacted_url() -> None:
    for url in (
        f"postgresql://u:{SENTINEL}@h/db?schema=jobs",
        f"postgresql://u@h/db?password={SENTINEL}",
        f"postgresql://u:{SENTINEL}%21@h/db",
    ):
        settings = parse(url)
        for text in (repr(settings), str(settings), settings.redacted):
            assert SENTINEL not in text, text
            assert SENTINEL.replace("-", "") not in text.replace("-", "")


def test_errors_of_an_open_store_show_no_password(pg_url: str) -> None:
    parts = urlsplit(pg_url)
    url = f"postgresql://postgres:{SENTINEL}@{parts.hostname}:{parts.port}{parts.path}"
    store = open_store(url)  # trust authentication ignores the password
    assert SENTINEL not in repr(store.settings)
    store.close()
    with pytest.raises(StoreError) as info:
        store.get("x")
    for text in _texts(info.value):
        assert SENTINEL not in text


# --- schema names --------------------------------------------------------------------


def test_a_schema_name_of_56_characters_works_and_longer_ones_are_refused(
    pg_module_url: str,
) -> None:
    assert MAX_SCHEMA_LENGTH == 56
    longest = "s" * MAX_SCHEMA_LENGTH
    store = open_store(f"{pg_module_url}?schema={longest}")
    try:
        seen: list[bool] = []
        waiter = threading.Thread(target=lambda: seen.append(store.wait_for_jobs(["q"], 10)))
        waiter.start()
        time.sleep(0.5)  # the listener is connected
        assert Engine(store).submit("k", 1, queue="q").state == "queued"
        waiter.join(timeout=15)
        assert seen == [True], "the 63-byte LISTEN channel did not deliver"
    finally:
        store.drop_schema()
    for n in (57, 63):
        with pytest.raises(BadStoreURL, match="1-56") as info:
            open_store(f"{pg_module_url}?schema={'s' * n}")
        assert f"({n} characters)" in str(info.value)


@pytest.mark.parametrize("schema", ["jobs%0A", "jobs%0D", "Jobs", "1jobs", "jobs-x", ""])
def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(
    pg_module_url: str, schema: str
) -> None:
    with pytest.raises(BadStoreURL, match="schema"):
        open_store(f"{pg_module_url}?schema={schema}")


# --- one job the store cannot claim fails alone ---------------------------------------


def test_a_job_with_a_nan_deadline_is_skipped_once_and_the_jobs_behind_it_are_leased(
    pg_url: str, admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(pg_url)
    try:
        engine = Engine(store)
        bad, first, second = engine.submit_many([("k", i, {"priority": i}) for i in range(3)])
        admin.run("UPDATE jobs SET deadline = 'NaN' WHERE id = %s", bad.id)  # behind our back
        me = Owner("h", 1, "i")
        with caplog.at_level(logging.WARNING):
            assert [j.id for j in engine.claim(me, limit=1)] == [first.id]
            assert [j.id for j in engine.claim(me, limit=5)] == [second.id]
            assert engine.claim(me, limit=5) == []
        mentions = [r for r in caplog.records if bad.id in r.getMessage()]
        assert len(mentions) == 1, [r.getMessage() for r in mentions]
        stored = store.get(bad.id)
        assert stored is not None
        assert stored.state == "queued"
        assert [e.event for e in store.history(bad.id)] == ["submit"]
    finally:
        store.close()


# --- the capacity count is cheap ------------------------------------------------------


def test_the_capacity_count_walks_an_index_not_the_table(pg_url: str, admin: Any) -> None:
    store = open_store(pg_url)
    try:
        engine = Engine(store)
        engine.submit_many([("k", i, {}) for i in range(3000)])
        admin.run("UPDATE jobs SET state = 'succeeded', finished_at = 1 WHERE priority = 0")
        engine.submit_many([("k", i, {}) for i in range(20)])
        admin.run("ANALYZE jobs")
        sql = store.sql.waiting(("queued", "retry_wait"))
        plan = "\n".join(r[0] for r in admin.all(f"EXPLAIN {sql}", "default", 6))
        assert "Index Only Scan using jobs_" in plan, plan  # jobs_due or jobs_state
        assert "Seq Scan" not in plan, plan
        assert "Limit" in plan, plan  # it stops at limit + 1 rows
    finally:
        store.close()


# --- drop_schema ------------------------------------------------------------------------


def test_drop_schema_removes_the_schema_and_everything_in_it(pg_url: str, admin: Any) -> None:
    store = open_store(f"{pg_url}?schema=doomed")
    Engine(store).submit("k", 1)
    store.liveness.hold(Owner("h", 1, "doomed-owner"), lambda: None)
    assert store.drop_schema() == ()
    assert admin.one("SELECT count(*) FROM pg_namespace WHERE nspname = 'doomed'") == 0


def test_drop_schema_of_public_or_a_shared_schema_removes_only_jobfsm_tables(
    pg_url: str, admin: Any
) -> None:
    jobfsm_tables = "('jobs', 'job_events', 'liveness', 'schema_version')"
    for schema in ("public", "shared"):
        admin.run(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        admin.run(f"CREATE TABLE {schema}.mine (x int)")
        store = open_store(f"{pg_url}?schema={schema}")
        Engine(store).submit("k", 1)
        assert store.drop_schema() == ("mine",)
        left = admin.all(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", schema
        )
        assert left == [("mine",)], left
        assert (
            admin.one(
                "SELECT count(*) FROM information_schema.tables "
                f"WHERE table_schema = %s AND table_name IN {jobfsm_tables}",
                schema,
            )
            == 0
        )


# --- a transaction-pooling proxy in front of the liveness session ---------------------


def _busy_servers(url: str, n: int) -> None:
    """Make the proxy open `n` server sessions (n clients in a transaction at once)."""
    conns = [psycopg.connect(url.split("?", maxsplit=1)[0]) for _ in range(n)]
    for c in conns:
        c.execute("SELECT 1")
    for c in conns:
        c.commit()  # a client leaving mid-transaction would make the proxy drop its session
        c.close()


def test_hold_through_transaction_pooling_is_refused_naming_it(
    pgbouncer: Callable[[bool], str], admin: Any
) -> None:
    url = pgbouncer(True)
    _busy_servers(url, 3)  # three server sessions, handed out in turn
    store = open_store(url)
    try:
        with pytest.raises(StoreError, match="transaction pooling"):
            store.liveness.hold(Owner("h", 1, "pooled"), lambda: None)
    finally:
        store.close()
    assert admin.one("SELECT count(*) FROM liveness") == 0, "a refused hold registered"
    held = admin.one(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        LIVENESS_CLASS,
    )
    assert held == 0, "a refused hold took the liveness lock"


def test_a_liveness_session_moved_by_a_pooler_counts_as_lost_and_says_why(
    pgbouncer: Callable[[bool], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = pgbouncer(False)  # last-used first: one idle client keeps its server session
    store = open_store(url)
    lost = threading.Event()
    try:
        with caplog.at_level(logging.WARNING):
            store.liveness.hold(Owner("h", 1, "moved"), lost.set)
            # another client takes the idle server session that holds the lock...
            other = psycopg.connect(url.split("?")[0])
            try:
                other.execute("SELECT 1")  # ...inside its open transaction
                assert lost.wait(10), "the monitor did not notice its session moved"
            finally:
                other.close()
        assert any("transaction pooling" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


@pytest.mark.parametrize("state", ["queued\n", "queued\r", "Queued", "queued;--"])
def test_a_state_name_that_is_not_a_plain_identifier_is_refused(state: str) -> None:
    with pytest.raises(BadInput, match="state names"):
        state_list(("leased", state))


def test_a_libpq_parameter_with_a_space_reaches_the_server_as_written(pg_url: str) -> None:
    # given a store URL whose libpq `options` holds a space (percent-encoded, as URLs do)
    store = open_store(f"{pg_url}?options=-c%20statement_timeout%3D4321")
    try:
        # when the store's own connection asks the server for the setting
        with store.connection("test") as conn:
            row = conn.execute("SHOW statement_timeout").fetchone()
    finally:
        store.close()
    # then libpq passed it on (a "+" in place of the space was refused by libpq)
    assert row is not None
    assert row[0] == "4321ms"
