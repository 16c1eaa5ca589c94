"""Transactional submit: jobs written inside the caller's own transaction (SQLite, PostgreSQL)."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fsm import Engine, open_store
from fsm.errors import BadInput, QueueFull
from fsm.policies import Limits, Policy
from fsm.ports import Store
from fsm.records import Job

ORDERS = "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)"


class Backend:
    """One store URL and how to open the caller's own connections to its database."""

    def __init__(self, url: str, connect: Callable[[], Any]) -> None:
        self.url = url
        self.connect = connect


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        url = f"sqlite:///{path}"
        open_store(url).close()  # creates the schema
        yield Backend(url, lambda: sqlite3.connect(path, timeout=30))
        return
    import psycopg

    pg_url = request.getfixturevalue("pg_url")
    open_store(pg_url).close()
    yield Backend(pg_url, lambda: psycopg.connect(pg_url))


def _orders(conn: Any) -> None:
    conn.execute(ORDERS)
    conn.commit()


def _order(conn: Any, order_id: str) -> None:
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO orders (id, total) VALUES ({mark}, 100)", (order_id,))


def _audit_rows(store: Store, job_id: str) -> int:
    return len(store.history(job_id))


def test_a_rolled_back_submit_leaves_no_job_and_no_audit_entry(backend: Backend) -> None:
    # given a store and the application's own connection, with its own table
    store = open_store(backend.url)
    engine = Engine(store)
    conn = backend.connect()
    _orders(conn)
    try:
        # when an order and its job are written in one transaction that rolls back
        _order(conn, "o-1")
        job = engine.submit("order.confirm", {"order": "o-1"}, conn=conn)
        conn.rollback()

        # then neither the order nor the job nor its audit entry exists
        assert store.get(job.id) is None
        assert _audit_rows(store, job.id) == 0
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0
    finally:
        conn.close()
        store.close()


def test_a_committed_submit_is_visible_with_its_audit_entry(backend: Backend) -> None:
    store = open_store(backend.url)
    engine = Engine(store)
    conn = backend.connect()
    _orders(conn)
    try:
        _order(conn, "o-2")
        job = engine.submit("order.confirm", {"order": "o-2"}, conn=conn)
        # before the commit, other connections do not see it
        assert store.get(job.id) is None

        conn.commit()

        assert store.get(job.id) == job
        assert [e.event for e in store.history(job.id)] == ["submit"]
    finally:
        conn.close()
        store.close()


def test_an_idempotency_key_already_stored_returns_the_stored_job(backend: Backend) -> None:
    store = open_store(backend.url)
    engine = Engine(store)
    first = engine.submit("order.confirm", {"n": 1}, idempotency_key="order:o-3")
    conn = backend.connect()
    try:
        again = engine.submit("order.confirm", {"n": 2}, idempotency_key="order:o-3", conn=conn)
        conn.commit()
        assert again == first
        assert store.counts() == {("default", "queued"): 1}
    finally:
        conn.close()
        store.close()


def test_a_full_queue_refuses_the_jobs_and_keeps_the_callers_own_writes(backend: Backend) -> None:
    # given a queue with room for one job, already taken
    store = open_store(backend.url)
    engine = Engine(store, policy=Policy(limits=Limits(queue_capacity={"default": 1})))
    engine.submit("order.confirm", {})
    conn = backend.connect()
    _orders(conn)
    try:
        # when the caller writes an order, then submits into the full queue
        _order(conn, "o-4")
        with pytest.raises(QueueFull):
            engine.submit("order.confirm", {}, conn=conn)
        # then the caller's transaction is still usable: its order commits, no job does
        conn.commit()
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1
        assert store.counts() == {("default", "queued"): 1}
    finally:
        conn.close()
        store.close()


def test_commits_and_rollbacks_from_many_threads_keep_exactly_the_committed_jobs(
    backend: Backend,
) -> None:
    # given 6 threads, each with its own connection, committing or rolling back at random
    store = open_store(backend.url)
    engine = Engine(store)
    setup = backend.connect()
    _orders(setup)
    setup.close()
    committed: list[str] = []
    rolled_back: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        rng = random.Random(n)
        conn = backend.connect()
        try:
            for i in range(20):
                _order(conn, f"o-{n}-{i}")
                jobs = engine.submit_many(
                    [("order.confirm", {"order": f"o-{n}-{i}", "k": k}, {}) for k in range(2)],
                    conn=conn,
                )
                keep = rng.random() < 0.5
                if keep:
                    conn.commit()
                else:
                    conn.rollback()
                with lock:
                    (committed if keep else rolled_back).extend(j.id for j in jobs)
        except BaseException as err:  # reported by the main thread
            errors.append(err)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    # then exactly the committed jobs exist, each with one audit entry
    assert not errors, errors
    assert committed
    assert rolled_back
    assert all(store.get(i) is not None for i in committed)
    assert all(_audit_rows(store, i) == 1 for i in committed)
    assert all(store.get(i) is None and _audit_rows(store, i) == 0 for i in rolled_back)
    assert store.counts() == {("default", "queued"): len(committed)}
    store.close()


def test_bad_connections_are_refused_by_name_and_nothing_is_stored(backend: Backend) -> None:
    store = open_store(backend.url)
    engine = Engine(store)
    closed = backend.connect()
    closed.close()
    try:
        with pytest.raises(BadInput, match="needs a"):
            engine.submit("order.confirm", {}, conn=object())
        with pytest.raises(BadInput, match=r"closed|cannot be used"):
            engine.submit("order.confirm", {}, conn=closed)
        assert store.counts() == {}
    finally:
        store.close()


def test_a_sqlite_connection_to_another_file_or_in_autocommit_is_refused(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    engine = Engine(store)
    other = sqlite3.connect(tmp_path / "other.db")
    auto = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    try:
        with pytest.raises(BadInput, match="not to this store's file"):
            engine.submit("order.confirm", {}, conn=other)
        with pytest.raises(BadInput, match="autocommit"):
            engine.submit("order.confirm", {}, conn=auto)
        # an explicit BEGIN makes the same connection usable
        auto.execute("BEGIN")
        engine.submit("order.confirm", {}, conn=auto)
        auto.execute("ROLLBACK")
        assert store.counts() == {}
    finally:
        other.close()
        auto.close()
        store.close()


@pytest.mark.postgres
def test_a_postgres_connection_to_another_database_or_in_autocommit_is_refused(
    pg_url: str, pg_server: str
) -> None:
    import psycopg

    store = open_store(pg_url)
    engine = Engine(store)
    try:
        with (
            psycopg.connect(pg_server) as other,
            pytest.raises(BadInput, match="not to this store"),
        ):
            engine.submit("order.confirm", {}, conn=other)
        with psycopg.connect(pg_url, autocommit=True) as auto:
            with pytest.raises(BadInput, match="autocommit"):
                engine.submit("order.confirm", {}, conn=auto)
            with auto.transaction():
                job = engine.submit("order.confirm", {}, conn=auto)
        assert store.get(job.id) == job
        with psycopg.connect(pg_url) as failed:
            with pytest.raises(psycopg.errors.DivisionByZero):
                failed.execute("SELECT 1/0")
            with pytest.raises(BadInput, match="has failed"):
                engine.submit("order.confirm", {}, conn=failed)
        assert store.counts() == {("default", "queued"): 1}
    finally:
        store.close()


def test_the_memory_store_refuses_a_connection_by_name() -> None:
    engine = Engine(open_store("memory://"))
    with pytest.raises(BadInput, match="cannot submit inside a caller's transaction"):
        engine.submit("order.confirm", {}, conn=object())


class _Recorder:
    def __init__(self) -> None:
        self.published: list[Job] = []

    def publish(self, jobs: Any) -> None:
        self.published.extend(jobs)

    def close(self) -> None:
        pass


def test_a_publisher_is_not_told_of_jobs_submitted_in_a_callers_transaction(
    backend: Backend,
) -> None:
    store = open_store(backend.url)
    publisher = _Recorder()
    engine = Engine(store, publisher=publisher)
    conn = backend.connect()
    try:
        engine.submit("order.confirm", {}, conn=conn)
        conn.rollback()
        plain = engine.submit("order.confirm", {})
        assert [j.id for j in publisher.published] == [plain.id]
    finally:
        conn.close()
        store.close()


@pytest.mark.postgres
def test_a_commit_wakes_a_waiting_listener_by_notification_a_rollback_never(pg_url: str) -> None:
    import psycopg

    store = open_store(pg_url)
    engine = Engine(store)
    store.wait_for_jobs(["default"], 0.05)  # type: ignore[attr-defined]  # LISTEN is up
    woke: list[float] = []

    def waiter(timeout: float) -> None:
        if store.wait_for_jobs(["default"], timeout):  # type: ignore[attr-defined]
            woke.append(time.monotonic())

    try:
        # a rollback sends no notification
        with psycopg.connect(pg_url) as conn:
            t = threading.Thread(target=waiter, args=(1.0,))
            t.start()
            engine.submit("order.confirm", {}, conn=conn)
            time.sleep(0.2)
            conn.rollback()
            t.join()
        assert woke == []

        # a commit wakes the waiter by its notification, long before the waiter's own 5 s
        # timeout (how fast is a benchmark's figure: benchmarks/latency.py, in_txn)
        latencies = []
        for _ in range(5):
            with psycopg.connect(pg_url) as conn:
                t = threading.Thread(target=waiter, args=(5.0,))
                t.start()
                time.sleep(0.1)  # the waiter is inside wait_for_jobs
                engine.submit("order.confirm", {}, conn=conn)
                time.sleep(0.1)
                assert not woke, "woken before the commit"
                committed = time.monotonic()
                conn.commit()
                t.join()
            latencies.append(woke.pop() - committed)
        print(f"commit -> wake-up latencies (s): {[round(x, 4) for x in latencies]}")
        assert max(latencies) < 2.5  # half the timeout: the notification, not the timeout
    finally:
        store.close()


@pytest.mark.postgres
def test_commit_wakes_a_real_worker_that_would_otherwise_poll_in_30_s(pg_url: str) -> None:
    import psycopg

    from fsm.worker import Context, Worker

    store = open_store(pg_url)
    engine = Engine(store)
    started: list[float] = []

    def confirm(ctx: Context) -> None:
        started.append(time.monotonic())

    worker = Worker(engine, {"order.confirm": confirm}, poll_interval=30.0, install_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert worker.wait_started(30)
        time.sleep(0.5)  # the worker is idle, blocked waiting for a wake-up
        with psycopg.connect(pg_url) as conn:
            job = engine.submit("order.confirm", {}, conn=conn)
            time.sleep(0.3)
            assert not started, "ran before the commit"
            committed = time.monotonic()
            conn.commit()
        assert engine.wait(job.id, timeout=10).state == "succeeded"
        latency = started[0] - committed
        print(f"commit -> handler start: {latency * 1000:.1f} ms")
        assert latency < 1.0  # the wake-up, not the 30 s poll (claim and start included)
    finally:
        worker.stop()
        thread.join(timeout=30)
        store.close()


@pytest.mark.postgres
def test_the_async_engine_submits_inside_a_callers_transaction(pg_url: str) -> None:
    import asyncio

    import psycopg

    from fsm.service.aio import AsyncEngine

    store = open_store(pg_url)

    async def main() -> Job:
        async with AsyncEngine(Engine(store)) as aengine:
            with psycopg.connect(pg_url) as conn:
                job = await aengine.submit("order.confirm", {}, conn=conn)
                conn.rollback()
                assert store.get(job.id) is None
                job = await aengine.submit("order.confirm", {}, conn=conn)
                conn.commit()
                return job

    try:
        job = asyncio.run(main())
        assert store.get(job.id) == job
    finally:
        store.close()


@pytest.mark.postgres
def test_the_async_engine_joins_a_callers_async_connection(pg_url: str) -> None:
    import asyncio

    import psycopg

    from fsm.service.aio import AsyncEngine

    store = open_store(pg_url)

    async def main() -> tuple[Job, Job, list[str]]:
        async with AsyncEngine(Engine(store), path="async") as aengine:
            async with await psycopg.AsyncConnection.connect(pg_url) as conn:
                # given: an order row and its job in one transaction, rolled back
                await conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY)")
                await conn.commit()
                await conn.execute("INSERT INTO orders VALUES (1)")
                gone = await aengine.submit("order.confirm", {"order": 1}, conn=conn)
                assert store.get(gone.id) is None  # not visible before the commit
                await conn.rollback()
                # when: the same again, committed
                await conn.execute("INSERT INTO orders VALUES (2)")
                kept = await aengine.submit(
                    "order.confirm", {"order": 2}, conn=conn, idempotency_key="order-2"
                )
                again = await aengine.submit(
                    "order.confirm", {"order": 2}, conn=conn, idempotency_key="order-2"
                )
                assert again == kept  # the key's second submit returns the first job
                await conn.commit()
            # and: a blocking connection still works here, on a thread
            with psycopg.connect(pg_url) as blocking:
                third = await aengine.submit("order.confirm", {"order": 3}, conn=blocking)
                blocking.commit()
            refusals = []
            for bad in (object(), "postgresql://x"):
                with pytest.raises(BadInput) as caught:
                    await aengine.submit("order.confirm", {}, conn=bad)
                refusals.append(str(caught.value))
            assert store.get(third.id) is not None
            return gone, kept, refusals

    try:
        gone, kept, refusals = asyncio.run(main())
        # then: the rolled-back job and its audit entry are gone; the committed one is kept
        assert store.get(gone.id) is None
        assert store.history(gone.id) == []
        assert store.get(kept.id) == kept
        assert [e.event for e in store.history(kept.id)] == ["submit"]
        assert all("conn=" in r for r in refusals)
    finally:
        store.close()


@pytest.mark.postgres
def test_an_async_connection_on_the_thread_path_is_refused_by_name(pg_url: str) -> None:
    import asyncio

    import psycopg

    from fsm.service.aio import AsyncEngine

    store = open_store(pg_url)

    async def main() -> str:
        async with (
            AsyncEngine(Engine(store), path="threads") as aengine,
            await psycopg.AsyncConnection.connect(pg_url) as conn,
        ):
            with pytest.raises(BadInput) as caught:
                await aengine.submit("order.confirm", {}, conn=conn)
            return str(caught.value)

    try:
        assert "AsyncConnection" in asyncio.run(main())
        assert store.counts() == {}
    finally:
        store.close()
