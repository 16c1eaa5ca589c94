"""AsyncEngine and Engine.wait on a real SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import adapters.postgres.waiting
import fsm.service.aio
import fsm.service.waiting
from fsm import AsyncEngine, Engine, Owner, open_store
from fsm.errors import BadInput, WaitTimeout
from fsm.records import Job


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    e = Engine(open_store(store_url))
    yield e
    e.store.close()


OWNER = Owner(host="test-host", pid=1, incarnation="t")


def run_to_end(engine: Engine, job: Job, *, after: float, outcome: str = "succeed") -> None:
    """As a worker would, `after` seconds from now, on another thread."""

    def work() -> None:
        time.sleep(after)
        (leased,) = engine.claim(OWNER, limit=1, ids=[job.id])
        engine.start(job.id, leased.fence)
        if outcome == "succeed":
            engine.succeed(job.id, leased.fence, {"ok": job.id})
        else:
            engine.ambiguous(job.id, leased.fence, "unknown")

    threading.Thread(target=work, daemon=True).start()


def test_engine_wait_returns_the_finished_job(engine: Engine) -> None:
    # given: a job a worker finishes 0.3 s from now
    job = engine.submit("k", 1)
    run_to_end(engine, job, after=0.3)

    # when: a caller waits for it
    done = engine.wait(job.id, timeout=10)

    # then: it gets the finished record
    assert done.state == "succeeded"
    assert done.result == {"ok": job.id}


def test_wait_returns_on_a_parked_state_too(engine: Engine) -> None:
    # given: a job whose outside effect becomes unknown: an operator must decide
    job = engine.submit("k", 1)
    run_to_end(engine, job, after=0.1, outcome="ambiguous")

    # then: waiting for it ends there, rather than at the timeout
    assert engine.wait(job.id, timeout=10).state == "investigate"


def test_wait_times_out_naming_the_job_and_changes_nothing(engine: Engine) -> None:
    # given: a job nobody runs
    job = engine.submit("k", 1)
    before = engine.history(job.id)

    # when / then: the wait gives up after its timeout, with a clear error
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match=f"job {job.id}: still 'queued' after waiting 0.3s"):
        engine.wait(job.id, timeout=0.3)
    assert 0.3 <= time.monotonic() - began < 3.0
    assert engine.get(job.id) == job
    assert engine.history(job.id) == before


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "10", True, 10**9])
def test_a_bad_wait_timeout_is_refused(engine: Engine, bad: object) -> None:
    job = engine.submit("k", 1)
    with pytest.raises(BadInput, match="wait timeout"):
        engine.wait(job.id, timeout=bad)  # type: ignore[arg-type]


def test_postgres_wait_wakes_on_notify_not_by_polling(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: waits that would re-read only once a minute on their own
    monkeypatch.setattr(fsm.service.waiting, "WAIT_RECHECK", 60.0)
    engine = Engine(open_store(pg_url))
    try:
        sync_job, async_job = engine.submit("k", 1), engine.submit("k", 2)
        run_to_end(engine, sync_job, after=0.5)
        run_to_end(engine, async_job, after=0.5)

        # when: both kinds of wait are made
        began = time.monotonic()
        done = engine.wait(sync_job.id, timeout=30)

        async def wait_async() -> Job:
            async with AsyncEngine(engine) as aengine:
                return await aengine.wait(async_job.id, timeout=30)

        adone = asyncio.run(wait_async())

        # then: the NOTIFY sent when the jobs finished woke them, long before a re-read
        assert done.state == adone.state == "succeeded"
        assert time.monotonic() - began < 10.0
    finally:
        engine.store.close()


def test_closing_a_postgres_store_that_waited_stops_its_listener_at_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a store whose listener of final states waits 30 s per slice of LISTEN
    monkeypatch.setattr(adapters.postgres.waiting, "LISTEN_SLICE", 30.0)
    engine = Engine(open_store(pg_url))
    job = engine.submit("k", 1)
    before = set(threading.enumerate())
    with pytest.raises(WaitTimeout):
        engine.wait(job.id, timeout=0.2)
    (listener,) = [t for t in set(threading.enumerate()) - before if t.name == "jobfsm-pg-final"]

    # when: the store is closed
    began = time.monotonic()
    engine.store.close()

    # then: its own notification woke the listener, which ended, well before the slice
    assert not listener.is_alive()
    assert time.monotonic() - began < 15.0


def test_many_async_waits_hold_no_thread_while_waiting(engine: Engine) -> None:
    # given: 60 jobs, an AsyncEngine with only 2 threads for store calls
    jobs = engine.submit_many([("k", i, {}) for i in range(60)])

    async def main() -> list[Job]:
        async with AsyncEngine(engine, max_threads=2) as aengine:
            waits = [asyncio.create_task(aengine.wait(j.id, timeout=60)) for j in jobs]
            await asyncio.sleep(0.3)
            # when: a worker finishes them while all 60 waits are pending
            for job in jobs:
                run_to_end(engine, job, after=0)
            return await asyncio.gather(*waits)

    # then: every wait returns its job
    done = asyncio.run(main())
    assert [j.id for j in done] == [j.id for j in jobs]
    assert {j.state for j in done} == {"succeeded"}


def _trail(engine: Engine, job_id: str) -> list[tuple[object, ...]]:
    return [
        (e.event, e.from_state, e.to_state, e.outcome, e.actor, e.reason)
        for e in engine.history(job_id)
    ]


def test_the_async_engine_writes_what_the_engine_writes(store_url: str, tmp_path: Path) -> None:
    """The same operations through Engine (on a reference SQLite file) and through
    AsyncEngine (on the store under test) leave the same audit trail."""

    def park(engine: Engine, job: Job) -> None:
        (leased,) = engine.claim(OWNER, limit=1, ids=[job.id])
        engine.start(job.id, leased.fence)
        engine.ambiguous(job.id, leased.fence, "unknown")

    reference = Engine(open_store(f"sqlite:///{tmp_path / 'reference.db'}"))
    subject = Engine(open_store(store_url))
    try:
        # given / when: the reference, through the blocking Engine
        a = reference.submit("k", {"n": 1}, idempotency_key="order-1")
        again = reference.submit("k", {"n": 2}, idempotency_key="order-1")
        (b,) = reference.submit_many([("k", 2, {})])
        reference.cancel(b.id, actor="ops", reason="dup")
        park(reference, a)
        reference.resolve(a.id, outcome="failed", actor="ops", reason="checked", result=1)
        reference.requeue(a.id, actor="ops", reason="again", attempts=1)

        # and the same through AsyncEngine
        async def run() -> list[Job]:
            async with AsyncEngine(subject) as aengine:
                x = await aengine.submit("k", {"n": 1}, idempotency_key="order-1")
                x_again = await aengine.submit("k", {"n": 2}, idempotency_key="order-1")
                (y,) = await aengine.submit_many([("k", 2, {})])
                await aengine.cancel(y.id, actor="ops", reason="dup")
                park(subject, x)
                await aengine.resolve(
                    x.id, outcome="failed", actor="ops", reason="checked", result=1
                )
                await aengine.requeue(x.id, actor="ops", reason="again", attempts=1)
                assert await aengine.history(x.id) == subject.history(x.id)
                return [x, x_again, y, await aengine.get(x.id)]

        x, x_again, y, x_now = asyncio.run(run())

        # then: the idempotency key returned the first job both ways, and every trail
        # (event, from, to, outcome, actor, reason) is the reference's
        assert again.id == a.id
        assert x_again.id == x.id
        assert _trail(subject, x.id) == _trail(reference, a.id)
        assert _trail(subject, y.id) == _trail(reference, b.id)
        assert x_now.state == reference.get(a.id).state == "queued"
    finally:
        reference.store.close()
        subject.store.close()


def test_drop_schema_removes_what_waiting_added(pg_url: str) -> None:
    # given: a schema in which a wait made the final-state trigger and its function
    store = open_store(f"{pg_url}?schema=waited")
    engine = Engine(store)
    job = engine.submit("k", 1)
    with pytest.raises(WaitTimeout):
        engine.wait(job.id, timeout=0.1)

    # when: the store drops its schema
    store.drop_schema()  # type: ignore[attr-defined]

    # then: nothing of it is left, the trigger's function included
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'waited'").fetchone()
        functions = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'jobfsm_notify_final'"
        ).fetchone()
    assert row == (0,)
    assert functions == (0,)


def test_a_role_that_cannot_make_the_trigger_still_waits_by_re_reading(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given: the schema made by its owner, and a role that may read and write jobs
    # but not make triggers on their table
    owner = Engine(open_store(pg_url))
    role = f"waiter_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    user_url = pg_url.replace("postgres@", f"{role}@", 1) + "?migrate=false"
    waiter = Engine(open_store(user_url))
    try:
        job = owner.submit("k", 1)
        run_to_end(owner, job, after=0.3)

        # when: that role waits
        done = waiter.wait(job.id, timeout=20)

        # then: it gets the finished job (by its once-a-second re-read), and says why
        assert done.state == "succeeded"
        assert "cannot make the final-state trigger" in caplog.text
    finally:
        waiter.store.close()
        owner.store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_the_async_engine_path_is_checked(sqlite_url: str) -> None:
    engine = Engine(open_store(sqlite_url))
    try:
        # an unknown path, and the async path on a store without an asyncio twin
        with pytest.raises(BadInput, match="path must be one of auto, async, threads"):
            AsyncEngine(engine, path="fast")
        with pytest.raises(BadInput, match="SqliteStore has no asyncio twin"):
            AsyncEngine(engine, path="async")
        # auto: SQLite goes to threads
        assert not AsyncEngine(engine).uses_async_store
    finally:
        engine.store.close()
