"""PostgreSQL store specifics: URLs, migrations, SKIP LOCKED, indexes, LISTEN/NOTIFY."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from typing import Any

import attrs
import pytest

from adapters.postgres import LATEST, open_store
from adapters.postgres.store import COPY_MIN
from fsm.clock import FakeClock
from fsm.errors import BadInput, BadStoreURL, SchemaError, StoreError, TransientStoreError
from fsm.lifecycle.core import decide
from fsm.ports import ClaimRequest
from fsm.records import Decision, Job, Owner
from fsm.registry import open_store as registry_open
from fsm.service.engine import Engine

pytestmark = pytest.mark.postgres

OWNER = Owner("host-a", 1, "inc-a")


def _engine(url: str) -> tuple[Engine, FakeClock]:
    clock = FakeClock()
    return Engine(open_store(url), clock=clock), clock


# --- URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("schema=Bad-Name", "schema"),
        ("schema=1abc", "schema"),
        ("pool_max=0", "pool_max"),
        ("pool_max=1000", "pool_max"),
        ("pool_max=ten", "pool_max"),
        ("pool_timeout=-1", "pool_timeout"),
        ("migrate=maybe", "migrate"),
        ("schema=a&schema=b", "schema"),
        ("no_such_libpq_option=1", "no_such_libpq_option"),
    ],
)
def test_a_bad_store_url_is_refused_with_an_error_naming_the_option(query: str, named: str) -> None:
    with pytest.raises(BadStoreURL, match=named):
        open_store(f"postgresql://postgres:s3cret@127.0.0.1:5432/db?{query}")


def test_errors_about_a_url_never_show_its_password() -> None:
    with pytest.raises(BadStoreURL) as caught:
        open_store("postgresql://postgres:s3cret@127.0.0.1:5432/db?schema=BAD")
    assert "s3cret" not in str(caught.value)
    assert "***" in str(caught.value)


def test_an_unreachable_server_is_a_transient_error_naming_the_host() -> None:
    # given nothing listens on port 1
    started = time.monotonic()
    with pytest.raises(TransientStoreError, match=r"127\.0\.0\.1"):
        open_store("postgresql://postgres:s3cret@127.0.0.1:1/db")
    assert time.monotonic() - started < 10


def test_both_url_schemes_open_through_the_registry(pg_url: str) -> None:
    for scheme in ("postgresql", "postgres"):
        store = registry_open(pg_url.replace("postgresql", scheme, 1))
        try:
            assert store.counts() == {}
        finally:
            store.close()


def test_without_psycopg_the_registry_names_the_extra_to_install() -> None:
    # given a Python where psycopg cannot be imported
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from fsm.errors import MissingExtra\n"
        "from fsm.registry import open_store\n"
        "try:\n"
        "    open_store('postgresql://127.0.0.1/db')\n"
        "except MissingExtra as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install -e '.[postgres]'" in out.stdout


# --- migrations ------------------------------------------------------------------------


def test_migrating_twice_applies_each_migration_once(pg_url: str) -> None:
    store = open_store(f"{pg_url}?schema=app")
    try:
        assert store.schema_version() == LATEST
        assert store.migrate() == []
    finally:
        store.close()


def _migrate_child(url: str, start: Any, out: Any) -> None:
    from adapters.postgres import PostgresStore, parse

    store = PostgresStore(parse(url))
    start.wait(30)
    out.put(store.migrate())
    store.close()


def test_processes_migrating_at_once_apply_each_migration_once(pg_url: str, admin: Any) -> None:
    # given three processes ready to migrate the same fresh schema
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    url = f"{pg_url}?schema=raced"
    procs = [ctx.Process(target=_migrate_child, args=(url, start, out)) for _ in range(3)]
    for p in procs:
        p.start()
    # when they all migrate at once
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    # then exactly one applied the migrations and they are recorded once
    assert sorted(results) == [[], [], list(range(1, LATEST + 1))]
    assert admin.one("SELECT count(*) FROM raced.schema_version") == LATEST


def test_a_schema_newer_than_this_jobfsm_is_refused(pg_url: str, admin: Any) -> None:
    open_store(pg_url).close()
    admin.one(
        "INSERT INTO public.schema_version (version, description) VALUES (%s, 'future') "
        "RETURNING version",
        LATEST + 1,
    )
    for url in (pg_url, f"{pg_url}?migrate=false"):
        with pytest.raises(SchemaError, match="newer"):
            open_store(url)


def test_migrate_false_refuses_a_schema_that_was_never_migrated(pg_url: str) -> None:
    with pytest.raises(SchemaError, match="version 0"):
        open_store(f"{pg_url}?schema=fresh&migrate=false")


def test_schemas_keep_apps_in_one_database_apart(pg_url: str) -> None:
    a, _ = _engine(f"{pg_url}?schema=app_a")
    b, _ = _engine(f"{pg_url}?schema=app_b")
    try:
        a.submit("k", 1)
        assert a.counts() == {("default", "queued"): 1}
        assert b.counts() == {}
    finally:
        a.store.close()
        b.store.close()


# --- claim -------------------------------------------------------------------------------


def test_claim_skips_a_job_another_transaction_has_locked(pg_url: str, admin: Any) -> None:
    engine, _ = _engine(pg_url)
    try:
        first = engine.submit("k", 1, priority=0)
        second = engine.submit("k", 2, priority=1)
        # given another session holds a row lock on the first job
        admin.conn.execute("BEGIN")
        admin.one("SELECT id FROM jobs WHERE id = %s FOR UPDATE", first.id)
        # when a claim runs
        started = time.monotonic()
        leased = engine.claim(OWNER, limit=2)
        # then it leases the other job at once instead of waiting
        assert [j.id for j in leased] == [second.id]
        assert time.monotonic() - started < 2
        admin.conn.execute("ROLLBACK")
        assert [j.id for j in engine.claim(OWNER, limit=2)] == [first.id]
    finally:
        engine.store.close()


def test_a_lease_that_disagrees_with_the_core_is_rolled_back(pg_url: str) -> None:
    engine, clock = _engine(pg_url)
    store: Any = engine.store
    try:
        job = engine.submit("k", 1)

        def wrong(j: Job) -> Decision:  # a "core" whose lease differs from the SQL lease
            real = decide(j, "lease", clock.now(), engine.policy, owner=OWNER, lease_until=99.0)
            return attrs.evolve(real, job=attrs.evolve(real.job, fence=real.job.fence + 5))

        request = ClaimRequest(
            owner=OWNER,
            queues=("default",),
            now=clock.now(),
            limit=1,
            lease_until=99.0,
            states=("queued", "retry_wait"),
            decide=wrong,
        )
        with pytest.raises(StoreError, match="disagrees with the core"):
            store.claim(request)
        # nothing changed: still queued, no lease entry
        assert store.get(job.id) == job
        assert [e.event for e in store.history(job.id)] == ["submit"]
    finally:
        store.close()


def test_claim_and_the_sweep_use_their_partial_indexes(pg_url: str, admin: Any) -> None:
    engine, clock = _engine(pg_url)
    store: Any = engine.store
    try:
        engine.submit_many([("k", i, {}) for i in range(200)])
        admin.run("ANALYZE jobs")
        admin.run("SET enable_seqscan = off")
        claim_sql = store.sql.claim((("queued", "retry_wait"), False, True, False, False, False))
        params = {
            "queues": ["default"],
            "queue": "default",
            "now": clock.now(),
            "limit": 1,
            "ids": None,
            "owner": "{}",
            "lease_until": 1.0,
        }
        plan = "\n".join(r[0] for r in admin.conn.execute("EXPLAIN " + claim_sql, params))
        assert "jobs_due" in plan
        scan_sql = store.sql.scan(
            ("leased", "running", "cancelling"),
            lease=True,
            deadline=False,
            host=False,
            queues=False,
            kinds=False,
        )
        plan = "\n".join(
            r[0]
            for r in admin.conn.execute(
                "EXPLAIN " + scan_sql, {"lease": 1.0, "limit": 10, "deadline": None}
            )
        )
        assert "jobs_leased" in plan
    finally:
        store.close()


def test_a_handler_error_with_a_nul_is_recorded_not_lost(pg_url: str) -> None:
    engine, _ = _engine(pg_url)
    try:
        job = engine.submit("k", 1)
        [leased] = engine.claim(OWNER)
        engine.start(job.id, leased.fence)
        # when a handler's error text carries a NUL (PostgreSQL text cannot hold one)
        failed = engine.fail(job.id, leased.fence, "NUL \x00 in an error message", permanent=True)
        # then the failure is recorded, with the NUL escaped by the core
        assert failed.state == "failed"
        assert engine.get(job.id).last_error == "NUL \\x00 in an error message"
    finally:
        engine.store.close()


def test_a_value_postgresql_cannot_store_is_bad_input_and_changes_nothing(pg_url: str) -> None:
    engine, _ = _engine(pg_url)
    try:
        job = engine.submit("k", 1)
        before = engine.history(job.id)
        # given an entry that bypasses the core's cleaning, straight at the store
        raw = attrs.evolve(before[0], outcome="rejected", error="NUL \x00 here")
        with pytest.raises(BadInput, match="PostgreSQL rejected"):
            engine.store.record([raw])
        assert engine.history(job.id) == before
    finally:
        engine.store.close()


def test_a_large_batch_inserted_again_returns_the_stored_jobs_without_duplicates(
    pg_url: str, admin: Any
) -> None:
    engine, clock = _engine(pg_url)
    store: Any = engine.store
    try:
        # given a batch large enough for COPY, inserted once
        decisions = [engine.kernel.submit_decision(clock.now(), "k", i) for i in range(COPY_MIN)]
        assert store.insert(decisions) == [d.job for d in decisions]
        # when the same batch is inserted again (a retry after an unknown outcome)
        again = store.insert(decisions)
        # then the stored jobs come back and nothing is written twice
        assert again == [d.job for d in decisions]
        assert admin.one("SELECT count(*) FROM jobs") == COPY_MIN
        assert admin.one("SELECT count(*) FROM job_events") == COPY_MIN
    finally:
        store.close()


# --- LISTEN/NOTIFY -------------------------------------------------------------------------


def test_wait_for_jobs_wakes_when_a_job_is_inserted_into_its_queue(pg_url: str) -> None:
    waiter = open_store(pg_url)
    submitter, _ = _engine(pg_url)
    try:
        assert waiter.wait_for_jobs(["mail"], 0.05) is False  # starts listening
        woke: list[tuple[bool, float]] = []

        def wait() -> None:
            started = time.monotonic()
            woke.append((waiter.wait_for_jobs(["mail"], 10.0), time.monotonic() - started))

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        submitter.submit("k", 1, queue="other")  # another queue: no wake-up
        time.sleep(0.2)
        submitter.submit("k", 1, queue="mail")
        t.join(15)
        [(notified, waited)] = woke
        assert notified is True
        assert 0.3 < waited < 5
    finally:
        waiter.close()
        submitter.store.close()


def test_a_copied_batch_also_wakes_waiters_of_its_queue(pg_url: str) -> None:
    waiter = open_store(pg_url)
    submitter, _ = _engine(pg_url)
    try:
        assert waiter.wait_for_jobs(["bulk"], 0.05) is False  # starts listening
        submitter.submit_many([("k", i, {"queue": "bulk"}) for i in range(COPY_MIN)])
        assert waiter.wait_for_jobs(["bulk"], 10.0) is True
    finally:
        waiter.close()
        submitter.store.close()


def test_wait_for_jobs_returns_false_after_its_timeout(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        started = time.monotonic()
        assert store.wait_for_jobs(["idle"], 0.3) is False
        assert 0.25 < time.monotonic() - started < 3
        with pytest.raises(BadInput, match="timeout"):
            store.wait_for_jobs(["idle"], -1)
    finally:
        store.close()


def test_a_closed_store_refuses_work_with_a_clear_error(pg_url: str) -> None:
    store = open_store(pg_url)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("x")


def test_the_store_survives_a_server_side_connection_purge(pg_url: str, admin: Any) -> None:
    engine, _ = _engine(f"{pg_url}?pool_min=2&pool_max=2")
    try:
        job = engine.submit("k", 1)
        # given every pooled session is terminated by the server
        dbname = pg_url.rsplit("/", 1)[1]
        admin.all(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            dbname,
        )
        # then at most the calls that meet a dead connection fail, transiently
        outcomes = []
        for _ in range(4):
            try:
                outcomes.append(engine.get(job.id).id)
            except TransientStoreError:
                outcomes.append("transient")
        assert outcomes[-1] == job.id
        assert outcomes.count("transient") <= 2
    finally:
        engine.store.close()


def test_psycopg_is_imported_by_the_adapter_only() -> None:
    code = "import fsm, fsm.service.engine, fsm.registry, sys; print('psycopg' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
