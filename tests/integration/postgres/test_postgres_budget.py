"""The connection budget (adapters.postgres.budget): each process shape, counted for real
in `pg_stat_activity` of a database the test created, while the shape works hard enough
to fill every pool it may open."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from adapters.postgres import budget, parse
from adapters.postgres.budget import SHAPES
from fsm import AsyncEngine, Engine, Identity, Worker, open_store
from fsm.errors import BadStoreURL, WaitTimeout
from tests.integration.rabbitmq.helpers import prefix

__all__ = ["prefix"]  # the RabbitMQ tests' fixture: it deletes their queues

DOCS = Path(__file__).resolve().parents[3] / "docs" / "stores.md"
DEFAULTS = parse("postgresql://u@h/db")


class Census:
    """Counts the connections to one database (but its own), by application_name,
    every few milliseconds on a thread, and keeps the largest totals seen."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, application_name="census")
        self.peak = 0
        self.peak_roles: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' GROUP BY 1"
        ).fetchall()
        return dict(rows)

    def gone(self, timeout: float = 10.0) -> bool:
        """True once no connection is left (a backend ends a moment after its client
        closes the socket), False if some are still there after `timeout`."""
        stop = threading.Event()
        for _ in range(int(timeout / 0.02)):
            if not self.now():
                return True
            stop.wait(0.02)
        return not self.now()

    def _sample(self) -> None:
        while not self._stop.is_set():
            roles = self.now()
            total = sum(roles.values())
            if total > self.peak:
                self.peak, self.peak_roles = total, roles
            self._stop.wait(0.005)

    @contextmanager
    def watching(self) -> Iterator[Census]:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)
            self._stop.clear()

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def census(pg_url: str) -> Iterator[Census]:
    open_store(pg_url).close()  # the schema, so that no shape counts migrations
    c = Census(pg_url)
    try:
        yield c
    finally:
        c.close()


def _total(name: str) -> int:
    (shape,) = [s for s in SHAPES if s.name.startswith(name)]
    return shape.total(DEFAULTS)


def test_the_budget_table_in_the_docs_is_the_one_the_code_computes() -> None:
    text = DOCS.read_text()
    block = "generated: connection-budget -->"
    found = re.search(rf"<!-- BEGIN {block}\n(.*?)<!-- END {block}", text, re.S)
    assert found is not None, "docs/stores.md lost its connection-budget block"
    assert found.group(1) == budget.table(DEFAULTS), "regenerate it from budget.table"


def test_by_default_a_submitting_process_holds_2_and_one_that_also_waits_3() -> None:
    assert (DEFAULTS.pool_min, DEFAULTS.pool_max) == (0, 2)
    assert _total("submits (") == 2
    assert _total("submits and waits") == 3
    assert _total("`jobfsm worker` (polling") == 4
    assert _total("`jobfsm worker --delivery amqp") == 3


def test_pool_min_above_the_default_pool_max_is_refused_naming_both() -> None:
    with pytest.raises(BadStoreURL, match=r"pool_min must be an integer 0\.\.2, got '3'"):
        parse("postgresql://u@h/db?pool_min=3")
    assert parse("postgresql://u@h/db?pool_min=3&pool_max=3").pool_min == 3


def test_an_async_engine_that_only_submits_opens_nothing_until_used_then_at_most_pool_max(
    pg_url: str, census: Census
) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(pg_url) as aengine:
            # given an AsyncEngine just opened: its pools are lazy
            assert census.gone(), "opening left a connection open"
            # when 600 submits run, 200 at a time
            with census.watching():
                for _ in range(3):
                    await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(200)))
        assert census.gone(), "aclose left connections open"

    asyncio.run(main())
    # then it held at most the budget of its shape, all of them pooled
    assert census.peak == _total("submits (") == 2
    assert set(census.peak_roles) == {"jobfsm"}


def test_an_async_engine_that_submits_and_waits_holds_at_most_pool_max_plus_one(
    pg_url: str, census: Census
) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(pg_url) as aengine:
            assert census.gone(), "opening left a connection open"
            with census.watching():
                jobs = await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(200)))
                waits = [aengine.wait(job.id, timeout=0.5) for job in jobs[:50]]
                for outcome in await asyncio.gather(*waits, return_exceptions=True):
                    assert isinstance(outcome, WaitTimeout)
                await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(200)))

    asyncio.run(main())
    assert census.peak == _total("submits and waits") == 3
    assert census.peak_roles == {"jobfsm": 2, "jobfsm-wait": 1}


def test_a_blocking_engine_that_submits_from_32_threads_holds_at_most_pool_max(
    pg_url: str, census: Census
) -> None:
    with open_store(pg_url) as store:
        engine = Engine(store)
        assert census.gone(), "opening left a connection open"
        with census.watching(), ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda i: engine.submit("k", {"i": i}), range(600)))
    assert census.gone(), "close left connections open"
    assert census.peak == _total("submits (") == 2


def test_an_engine_and_an_async_engine_over_it_hold_two_pools_and_the_wait_listener(
    pg_url: str, census: Census
) -> None:
    with open_store(pg_url) as store:
        engine = Engine(store)

        async def main() -> None:
            aengine = AsyncEngine(engine)
            try:
                job = await aengine.submit("k", {})
                with ThreadPoolExecutor(16) as pool:
                    blocking = asyncio.get_running_loop().run_in_executor(
                        None, lambda: list(pool.map(lambda i: engine.submit("k", {}), range(400)))
                    )
                    await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(400)))
                    await blocking
                with pytest.raises(WaitTimeout):
                    await aengine.wait(job.id, timeout=0.3)
            finally:
                await aengine.aclose()

        assert census.gone(), "opening left a connection open"
        with census.watching():
            asyncio.run(main())
    assert census.peak == _total("submits through both") == 5


def _drain(engine: Engine, n: int) -> Callable[[], bool]:
    def done() -> bool:
        counts = engine.counts()
        return sum(c for (_q, s), c in counts.items() if s == "succeeded") >= n

    return done


def _run_worker(url: str, delivery: Any, census: Census, n: int = 400) -> dict[str, int]:
    """Submit `n` jobs, run a 16-slot Worker on them until all succeed; the roles seen
    while it ran steadily (the peak is the census's)."""
    with open_store(url) as store:
        Engine(store).submit_many([("k", {"i": i}, {}) for i in range(n)])
    engine = Engine(open_store(url))
    if delivery is not None:
        delivery = delivery(engine)
        engine.publisher = delivery

    def handler(ctx: Any) -> None:
        ctx.progress(half=True)  # written with the job: one more store call per job

    worker = Worker(
        engine,
        {"k": handler},
        delivery=delivery,
        concurrency=16,
        poll_interval=0.2,
        install_signals=False,
        identity=Identity(),
    )
    runner = threading.Thread(target=worker.run)
    done = _drain(engine, n)
    try:
        assert census.gone(), "opening left a connection open"
        with census.watching():
            runner.start()
            assert worker.wait_started(30)
            deadline = threading.Event()
            for _ in range(600):
                if done():
                    break
                deadline.wait(0.1)
            assert done(), "the worker did not finish its jobs"
            steady = census.now()
    finally:
        worker.stop()
        runner.join(30)
        engine.store.close()
    assert census.gone(), "the worker left connections open"
    return steady


def test_a_polling_worker_holds_pool_max_plus_its_listen_and_liveness_connections(
    pg_url: str, census: Census
) -> None:
    steady = _run_worker(pg_url, None, census)
    assert steady["jobfsm-listen"] == 1
    assert steady["jobfsm-liveness"] == 1
    assert census.peak <= _total("`jobfsm worker` (polling") == 4
    assert census.peak_roles.get("jobfsm", 0) <= DEFAULTS.pool_max


@pytest.mark.rabbitmq
def test_a_rabbitmq_worker_holds_pool_max_plus_its_liveness_connection(
    pg_url: str, census: Census, rabbit_url: str, prefix: str
) -> None:
    from adapters.rabbitmq import RabbitDelivery

    def delivery(engine: Engine) -> RabbitDelivery:
        return RabbitDelivery(rabbit_url, engine=engine, prefix=prefix)

    steady = _run_worker(pg_url, delivery, census)
    assert "jobfsm-listen" not in steady
    assert steady["jobfsm-liveness"] == 1
    assert census.peak <= _total("`jobfsm worker --delivery amqp") == 3


def test_the_url_application_name_names_every_connection(pg_url: str, census: Census) -> None:
    with open_store(f"{pg_url}?application_name=shop-web") as store:
        engine = Engine(store)
        job = engine.submit("k", {})
        with pytest.raises(WaitTimeout):
            engine.wait(job.id, timeout=0.2)
        assert census.now() == {"shop-web": 2}


def test_a_submitting_process_works_through_transaction_pooling_with_prepare_false(
    pgbouncer: Callable[[bool], str], admin: Any
) -> None:
    # given a store URL through PgBouncer 1.18 in pool_mode = transaction (4 server
    # sessions), which cannot keep prepared statements
    url = f"{pgbouncer(True)}&prepare=false"

    async def main() -> list[str]:
        async with await AsyncEngine.open(url) as aengine:
            jobs = []
            for _ in range(3):  # the same statements many times over: no prepared statements
                jobs += await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(20)))
            return [(await aengine.get(job.id)).id for job in jobs]

    # when an AsyncEngine and an Engine submit and read through it
    ids = asyncio.run(main())
    with open_store(url) as store:
        engine = Engine(store)
        ids += [engine.get(engine.submit("k", {"i": i}).id).id for i in range(20)]
    # then every job is stored
    assert admin.one("SELECT count(*) FROM jobs") == len(set(ids)) == 80


def test_prepare_must_be_a_boolean_and_false_turns_prepared_statements_off() -> None:
    with pytest.raises(BadStoreURL, match="prepare must be true or false, got 'sometimes'"):
        parse("postgresql://u@h/db?prepare=sometimes")
    assert (
        parse("postgresql://u@h/db?prepare=false").pool_options("p")["kwargs"]["prepare_threshold"]
        is None
    )
    assert "prepare_threshold" not in DEFAULTS.pool_options("p")["kwargs"]


def test_the_connection_budget_benchmark_runs_and_counts_within_the_budget(pg_server: str) -> None:
    from benchmarks import connection_budget

    counts = connection_budget.count_shapes(["sync"])
    assert counts["sync"] == (0, _total("submits ("))
    (row,) = connection_budget.burst(20, [1], rounds=1)
    assert row[0] == 1
    assert row[1] > 0


def test_with_pool_min_1_an_async_engine_keeps_no_idle_connection_in_the_blocking_pool(
    pg_url: str, census: Census
) -> None:
    # given pool_min=1: the asyncio pool keeps one connection; the blocking pool, which
    # an AsyncEngine that only submits never uses, is never opened
    async def main() -> None:
        async with await AsyncEngine.open(f"{pg_url}?pool_min=1") as aengine:
            await asyncio.sleep(0.5)  # the checks at open end, on the server too
            with census.watching():
                await asyncio.sleep(0.5)  # the pool makes its pool_min in the background
                await asyncio.gather(*(aengine.submit("k", {"i": i}) for i in range(200)))
                await asyncio.sleep(0.2)

    asyncio.run(main())
    # then it held the asyncio pool's connections only
    assert census.peak == DEFAULTS.pool_max == 2
    assert census.gone()
