"""AsyncEngine over PostgreSQL's asyncio twin (psycopg AsyncConnectionPool), for real:
no thread per store call, idempotency and compare-and-set under concurrency, bad
input, pool bounds, connections released on close, commits lost with their connection."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from adapters.postgres.aio import AsyncPostgresStore
from fsm import AsyncEngine, Engine, FakeClock, KindPolicy, Policy
from fsm.errors import (
    BadInput,
    IllegalTransition,
    JobNotFound,
    LeaseLost,
    TransientStoreError,
    UnknownKind,
)
from fsm.policies import Limits
from fsm.records import Job, Owner

pytestmark = pytest.mark.postgres

OWNER = Owner("host-a", 1, "inc-a")
T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


def _backends(url: str) -> int:
    """Connections to the test database, other than the one asking."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _settle(url: str, want: Callable[[int], bool], timeout: float = 10.0) -> int:
    """Backends once `want(n)` holds (server-side exits are not instant); fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        n = _backends(url)
        if want(n) or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def _failed_job(engine: Engine) -> Job:
    job = engine.submit("k", 1)
    [leased] = engine.claim(OWNER, ids=[job.id])
    engine.start(job.id, leased.fence)
    return engine.fail(job.id, leased.fence, "boom", permanent=True)


def test_the_async_path_runs_on_the_async_pool_and_adds_no_thread(pg_url: str) -> None:
    async def go() -> tuple[list[str], int, list[str]]:
        async with await AsyncEngine.open(pg_url) as aengine:
            # given: the store's asyncio twin, its pool open
            store = aengine.async_store
            assert isinstance(store, AsyncPostgresStore)
            assert isinstance(store.pool, AsyncConnectionPool)
            assert aengine.uses_async_store
            await aengine.counts()
            before = set(threading.enumerate())
            # when: 200 submits at once, each read back
            jobs = await asyncio.gather(*(aengine.submit("k", i) for i in range(200)))
            await asyncio.gather(*(aengine.get(j.id) for j in jobs))
            started = _started_since(before)
            counted = sum((await aengine.counts()).values())
            return started, counted, _engine_threads()

    started, counted, engine_threads = run(go)
    # then: every job is stored, and no thread was started for a store call (threads of
    # the process that end meanwhile, other tests' pools, count neither way)
    assert counted == 200
    assert started == []
    assert engine_threads == []


def _started_since(before: set[threading.Thread]) -> list[str]:
    """The names of the threads alive now that were not alive at `before`."""
    return [t.name for t in threading.enumerate() if t not in before]


def _engine_threads() -> list[str]:
    """The threads of AsyncEngines' pools (named `jobfsm-aio_<n>`)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("jobfsm-aio")]


def test_the_thread_path_does_use_threads(pg_url: str) -> None:
    # the same measures on path="threads" see the threads (so the test above can fail)
    async def go() -> tuple[list[str], list[str]]:
        async with await AsyncEngine.open(pg_url, path="threads", max_threads=4) as aengine:
            assert not aengine.uses_async_store
            assert aengine.async_store is None
            before = set(threading.enumerate())
            await asyncio.gather(*(aengine.submit("k", i) for i in range(50)))
            return _started_since(before), _engine_threads()

    started, engine_threads = run(go)
    assert started
    assert engine_threads


def test_two_hundred_concurrent_submits_with_one_key_make_one_job(pg_url: str) -> None:
    async def go() -> tuple[set[str], dict[tuple[str, str], int], list[str]]:
        async with await AsyncEngine.open(pg_url) as aengine:
            jobs = await asyncio.gather(
                *(aengine.submit("k", {"n": i}, idempotency_key="req-42") for i in range(200))
            )
            ids = {j.id for j in jobs}
            (job_id,) = ids
            trail = [e.event for e in await aengine.history(job_id)]
            return ids, await aengine.counts(), trail

    ids, counts, trail = run(go)
    assert len(ids) == 1
    assert counts == {("default", "queued"): 1}
    assert trail == ["submit"]


def test_concurrent_operator_writes_on_one_job_have_exactly_one_winner(pg_url: str) -> None:
    async def go() -> tuple[list[Any], list[str]]:
        async with await AsyncEngine.open(pg_url) as aengine:
            # given: a job that failed for good
            job = await asyncio.to_thread(_failed_job, aengine.engine)
            # when: 30 operators requeue the failed job at once
            outcomes = await asyncio.gather(
                *(
                    aengine.requeue(job.id, actor=f"op{i}", reason="again", attempts=3)
                    for i in range(30)
                ),
                return_exceptions=True,
            )
            trail = [e.event for e in await aengine.history(job.id)]
            return outcomes, trail

    outcomes, trail = run(go)
    # then: one requeue won the compare-and-set; every loser re-read, decided again on
    # the queued job and was refused; the trail holds the one requeue
    won = [o for o in outcomes if isinstance(o, Job)]
    lost = [o for o in outcomes if not isinstance(o, Job)]
    assert len(won) == 1
    assert won[0].state == "queued"
    assert all(isinstance(e, IllegalTransition) for e in lost), lost
    assert trail.count("requeue") == 1


def test_concurrent_cancels_of_one_job_are_one_audited_cancel(pg_url: str) -> None:
    async def go() -> tuple[set[str], list[str]]:
        async with await AsyncEngine.open(pg_url) as aengine:
            job = await aengine.submit("k", 1)
            done = await asyncio.gather(
                *(aengine.cancel(job.id, actor=f"op{i}", reason="stop") for i in range(30))
            )
            trail = [e.event for e in await aengine.history(job.id)]
            return {j.state for j in done}, trail

    states, trail = run(go)
    assert states == {"cancelled"}  # a repeat on a cancelled job is a no-op
    assert trail == ["submit", "cancel"]


def test_bad_input_on_the_async_path_names_it_and_changes_nothing(pg_url: str) -> None:
    limits = Limits(max_payload_bytes=1024)

    async def go() -> None:
        async with await AsyncEngine.open(
            pg_url, policy=Policy(limits=limits), kinds={"k": KindPolicy()}, strict_kinds=True
        ) as aengine:
            job = await aengine.submit("k", 1)
            before = (await aengine.counts(), await aengine.history(job.id))
            with pytest.raises(BadInput, match="payload"):
                await aengine.submit("k", "x" * 5000)
            with pytest.raises(UnknownKind, match="nope"):
                await aengine.submit_many([("k", 2, {}), ("nope", 3, {})])
            with pytest.raises(JobNotFound, match="no-such-job"):
                await aengine.cancel("no-such-job", actor="op", reason="r")
            with pytest.raises(JobNotFound):
                await aengine.history("no-such-job")
            with pytest.raises(IllegalTransition):
                await aengine.resolve(job.id, outcome="succeeded", actor="op", reason="r")
            assert (await aengine.counts(), await aengine.history(job.id)) == before

    run(go)


def test_the_async_pool_stays_within_pool_max(pg_url: str) -> None:
    async def go() -> tuple[int, int]:
        async with await AsyncEngine.open(f"{pg_url}?pool_max=3&pool_timeout=30") as aengine:
            store = aengine.async_store
            assert isinstance(store, AsyncPostgresStore)
            assert store.pool.max_size == 3
            peak = 0

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, store.pool.get_stats()["pool_size"])
                    await asyncio.sleep(0)

            # when: 200 submits arrive at once
            watcher = asyncio.create_task(watch())
            await asyncio.gather(*(aengine.submit("k", i) for i in range(200)))
            watcher.cancel()
            return peak, sum((await aengine.counts()).values())

    peak, stored = run(go)
    # then: all went through at most 3 connections
    assert stored == 200
    assert 1 <= peak <= 3


def test_a_call_waits_at_most_pool_timeout_for_a_connection(pg_url: str) -> None:
    async def go() -> float:
        async with await AsyncEngine.open(f"{pg_url}?pool_max=3&pool_timeout=0.5") as aengine:
            store = aengine.async_store
            assert isinstance(store, AsyncPostgresStore)
            # given: every pooled connection is held
            held = [await store.pool.getconn() for _ in range(3)]
            began = time.monotonic()
            # then: a call fails after pool_timeout, naming the bound
            with pytest.raises(TransientStoreError, match=r"pool_max=3"):
                await aengine.counts()
            waited = time.monotonic() - began
            for conn in held:
                await store.pool.putconn(conn)
            assert sum((await aengine.counts()).values()) == 0  # and works once released
            return waited

    assert 0.4 <= run(go) < 3.0


def test_aclose_releases_every_connection(pg_url: str) -> None:
    assert _settle(pg_url, lambda n: n == 0) == 0

    async def go() -> int:
        async with await AsyncEngine.open(f"{pg_url}?pool_max=4") as aengine:
            await asyncio.gather(*(aengine.submit("k", i) for i in range(100)))
            return await asyncio.to_thread(_backends, pg_url)

    during = run(go)
    assert during >= 2  # the blocking store's pool and the async pool
    # then: AsyncEngine.open opened the store, so aclose closed both pools
    assert _settle(pg_url, lambda n: n == 0) == 0


def test_aclose_of_an_engine_given_by_the_caller_leaves_its_store_open(pg_url: str) -> None:
    from fsm import open_store

    engine = Engine(open_store(pg_url))
    try:
        baseline = _settle(pg_url, lambda n: n >= 1)

        async def go() -> None:
            async with AsyncEngine(engine) as aengine:
                await asyncio.gather(*(aengine.submit("k", i) for i in range(50)))

        run(go)
        # the async pool's connections are gone; the blocking store still works
        assert _settle(pg_url, lambda n: n <= baseline) <= baseline
        assert engine.counts() == {("default", "queued"): 50}
    finally:
        engine.store.close()


def test_an_async_engine_refuses_a_second_event_loop(pg_url: str) -> None:
    from fsm import open_store

    engine = Engine(open_store(pg_url))
    aengine = AsyncEngine(engine)

    async def first() -> Job:
        job = await aengine.submit("k", 1)
        await aengine.aclose()  # a pool left open when its loop ends can hang asyncio.run
        return job

    try:
        job = run(first)
        with pytest.raises(BadInput, match="another event loop"):
            run(lambda: aengine.get(job.id))
    finally:
        engine.store.close()


class RecordingPublisher:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def publish(self, jobs: Sequence[Job]) -> None:
        self.calls.append((threading.current_thread().name, [j.id for j in jobs]))


def test_the_publisher_runs_off_the_loop_for_new_jobs_only(pg_url: str) -> None:
    publisher = RecordingPublisher()

    async def go() -> tuple[str, list[Job]]:
        async with await AsyncEngine.open(pg_url, publisher=publisher) as aengine:
            first = await aengine.submit("k", 1, idempotency_key="once")
            again = await aengine.submit("k", 1, idempotency_key="once")
            return threading.current_thread().name, [first, again]

    loop_thread, (first, again) = run(go)
    assert again.id == first.id
    assert publisher.calls == [(publisher.calls[0][0], [first.id])]
    assert publisher.calls[0][0] != loop_thread


def test_an_apply_committed_before_its_connection_broke_is_reported_applied(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy

    async def go() -> Job:
        async with await AsyncEngine.open(url, clock=FakeClock()) as aengine:
            job = await aengine.submit("k", 1)
            # given: the connection breaks after the server ran (and committed) the cancel
            proxy.arm(b"upd AS (UPDATE", "deliver_then_drop")
            # when: an operator cancels through the async pool
            return await aengine.cancel(job.id, actor="op", reason="stop")

    cancelled = run(go)
    # then: the store reconciled from a fresh connection: applied once, audited once
    assert proxy.fired.is_set()
    assert cancelled.state == "cancelled"
    events = admin.all("SELECT event FROM job_events WHERE job_id = %s ORDER BY seq", cancelled.id)
    assert [e[0] for e in events] == ["submit", "cancel"]


def test_an_apply_lost_before_the_server_is_a_transient_error(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy

    async def go() -> str:
        async with await AsyncEngine.open(url, clock=FakeClock()) as aengine:
            job = await aengine.submit("k", 1)
            proxy.arm(b"upd AS (UPDATE", "drop")
            with pytest.raises(TransientStoreError, match="not applied"):
                await aengine.cancel(job.id, actor="op", reason="stop")
            assert (await aengine.get(job.id)).state == "queued"
            # a retry goes through
            assert (await aengine.cancel(job.id, actor="op", reason="stop")).state == "cancelled"
            return job.id

    job_id = run(go)
    assert proxy.fired.is_set()
    events = admin.all("SELECT event FROM job_events WHERE job_id = %s ORDER BY seq", job_id)
    assert [e[0] for e in events] == ["submit", "cancel"]


def test_queue_capacity_holds_under_concurrent_async_submits(pg_url: str) -> None:
    from fsm.errors import QueueFull

    policy = Policy(limits=Limits(queue_capacity={"default": 10}))

    async def go() -> tuple[list[Any], dict[tuple[str, str], int]]:
        async with await AsyncEngine.open(pg_url, policy=policy) as aengine:
            outcomes = await asyncio.gather(
                *(aengine.submit("k", i) for i in range(50)), return_exceptions=True
            )
            return outcomes, await aengine.counts()

    outcomes, counts = run(go)
    # then: the capacity check and the insert were one step: never more than 10 waiting
    assert sum(isinstance(o, Job) for o in outcomes) == 10
    assert all(isinstance(o, Job | QueueFull) for o in outcomes), outcomes
    assert counts == {("default", "queued"): 10}


OPS = ("submit", "submit_key", "cancel", "requeue", "resolve", "erase", "park", "finish")


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(OPS), st.integers(0, 5), st.sampled_from(["a", "b"])),
        min_size=1,
        max_size=25,
    )
)
def test_any_sequence_through_the_async_pool_replays_to_the_stored_record(
    pg_url: str, steps: list[tuple[str, int, str]]
) -> None:
    """Operator actions and submits through the async pool, worker reports through the
    blocking Engine, in any order: every refused action changes nothing, and every
    job's audit trail replays through `decide` to its stored record."""
    from fsm.lifecycle.core import replay, same_except_heartbeats

    async def go() -> None:
        async with await AsyncEngine.open(pg_url, clock=FakeClock()) as aengine:
            engine = aengine.engine
            prefix = uuid.uuid4().hex  # this example's keys (the database outlives it)
            ids: list[str] = []
            for op, i, key in steps:
                if op in ("submit", "submit_key") or not ids:
                    options = {"idempotency_key": f"{prefix}-{key}"} if op == "submit_key" else {}
                    job = await aengine.submit("k", {"i": i}, **options)
                    if job.id not in ids:
                        ids.append(job.id)
                    continue
                job_id = ids[i % len(ids)]
                before = await aengine.get(job_id)
                try:
                    if op == "cancel":
                        await aengine.cancel(job_id, actor="op", reason="r")
                    elif op == "requeue":
                        await aengine.requeue(job_id, actor="op", reason="r", attempts=2)
                    elif op == "resolve":
                        await aengine.resolve(job_id, outcome="failed", actor="op", reason="r")
                    elif op == "erase":
                        await aengine.erase(job_id, actor="op", reason="r")
                    else:
                        await asyncio.to_thread(_work, engine, job_id, op)
                except IllegalTransition:
                    assert await aengine.get(job_id) == before  # refused: nothing changed
            for job_id in ids:
                stored = await aengine.get(job_id)
                rebuilt = replay(await aengine.history(job_id), engine.policy)
                assert rebuilt is not None
                assert same_except_heartbeats(rebuilt, stored), job_id

    run(go)


def _work(engine: Engine, job_id: str, op: str) -> None:
    """As a worker: lease, start, then park (ambiguous) or finish (succeed)."""
    leased = engine.claim(OWNER, ids=[job_id])
    if not leased:
        raise IllegalTransition(job_id, engine.get(job_id).state, "lease")
    engine.start(job_id, leased[0].fence)
    if op == "park":
        engine.ambiguous(job_id, leased[0].fence, "unknown")
    else:
        engine.succeed(job_id, leased[0].fence, {"ok": True})


def test_async_operators_racing_a_blocking_worker_leave_a_trail_that_replays(
    pg_url: str,
) -> None:
    """Cancels through the async pool race a worker's start and succeed through the
    blocking store on another thread: every write is a compare-and-set, so whichever
    order wins, the record is a legal end and its trail replays to it."""
    from fsm.lifecycle.core import replay, same_except_heartbeats

    async def go() -> list[tuple[Job, list[str]]]:
        async with await AsyncEngine.open(pg_url) as aengine:
            engine = aengine.engine
            jobs = [await aengine.submit("k", i) for i in range(10)]
            out = []
            for job in jobs:

                def work(job_id: str = job.id) -> None:
                    leased = engine.claim(OWNER, ids=[job_id])
                    if leased:
                        with contextlib.suppress(IllegalTransition, LeaseLost):
                            engine.start(job_id, leased[0].fence)
                            engine.succeed(job_id, leased[0].fence, "done")

                worker = asyncio.to_thread(work)
                cancels = [aengine.cancel(job.id, actor=f"op{i}", reason="r") for i in range(10)]
                await asyncio.gather(worker, *cancels, return_exceptions=True)
                stored = await aengine.get(job.id)
                trail = await aengine.history(job.id)
                rebuilt = replay(trail, engine.policy)
                assert rebuilt is not None
                assert same_except_heartbeats(rebuilt, stored)
                out.append((stored, [e.event for e in trail if e.outcome == "applied"]))
            return out

    results = run(go)
    for stored, events in results:
        # a cancel before the lease or the start wins; one of a running job makes it
        # cancelling, and the worker's succeed then ends it; after the succeed, refused
        assert stored.state in ("cancelled", "succeeded"), stored
        assert events.count("cancel") <= 1, events  # repeats were no-ops, never re-applied
        if stored.state != "succeeded":
            assert events.count("cancel") == 1, events


def test_dependencies_through_the_async_path_wait_and_follow_their_prerequisites(
    pg_url: str,
) -> None:
    async def go() -> tuple[Job, Job, Job, Job]:
        async with await AsyncEngine.open(pg_url) as aengine:
            assert aengine.uses_async_store
            first = await aengine.submit("k", 1)
            # given: a job waiting for one that has not finished
            waiting = await aengine.submit("k", 2, after=[first.id])
            assert waiting.state == "waiting"
            # when: an operator cancels the prerequisite through the async path
            await aengine.cancel(first.id, actor="t", reason="no longer needed")
            # then: the dependent followed its rule (cancel, the default), audited
            followed = await aengine.get(waiting.id)
            # and: a job whose prerequisite already finished is released at once
            done = await aengine.submit("k", 3)
            sync = aengine.engine
            [leased] = sync.claim(OWNER, ids=[done.id])
            sync.start(done.id, leased.fence)
            sync.succeed(done.id, leased.fence, result=None)
            released = await aengine.submit("k", 4, after=[done.id])
            # and: an unknown prerequisite is refused with nothing stored
            with pytest.raises(BadInput):
                await aengine.submit("k", 5, after=["01NOSUCHJOB000000000000000"])
            return waiting, followed, released, await aengine.get(released.id)

    waiting, followed, released, stored = run(go)
    assert followed.id == waiting.id
    assert followed.state == "cancelled"
    assert released.state == "queued"
    assert stored == released
