"""AsyncEngine agrees with `decide`, row by row, for every row of the lifecycle it can take.

The conformance suite's recipes (`fsm.testing.conformance`) reach each source state
with the blocking Engine; the row's event is then applied through AsyncEngine on
the same store and clock, and the stored record must be exactly `decide`'s.
Worker events (lease, start, succeed, ...) are the worker's, which calls the
blocking Engine; AsyncEngine takes submit and the operator events. SQLite runs on
threads; PostgreSQL runs on its asyncio twin (psycopg's async pool) and on threads.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from fsm import AsyncEngine, Engine, FakeClock, KindPolicy, open_store
from fsm.lifecycle.core import decide
from fsm.ports import Store
from fsm.records import AuditEntry, Job
from fsm.testing.conformance import RECIPES, conformance_policy, reach, table_rows

OPERATOR_EVENTS = ("cancel", "requeue", "resolve", "erase")


@pytest.fixture(params=["sqlite", "postgres", "postgres-threads"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Store, str, bool]]:
    """A store and the AsyncEngine path: SQLite on threads; PostgreSQL on its asyncio
    twin (psycopg's async pool) and, for comparison, on threads."""
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    s = open_store(url)
    native = request.param == "postgres"  # the asyncio twin answers every store call
    yield s, "auto" if request.param != "postgres-threads" else "threads", native
    s.close()


async def _apply(aengine: AsyncEngine, job_id: str, event: str, args: dict[str, Any]) -> None:
    if event == "cancel":
        await aengine.cancel(job_id, actor=args["actor"], reason=args["reason"])
    elif event == "erase":
        await aengine.erase(job_id, actor=args["actor"], reason=args["reason"])
    elif event == "requeue":
        await aengine.requeue(
            job_id, actor=args["actor"], reason=args["reason"], attempts=args["attempts"]
        )
    else:
        result = json.loads(args.get("result_json", "null"))
        await aengine.resolve(
            job_id,
            outcome=args["outcome"],
            actor=args["actor"],
            reason=args["reason"],
            result=result,
        )


def test_every_operator_row_through_the_async_engine_equals_the_core_decision(
    store: tuple[Store, str, bool],
) -> None:
    store, path, native = store
    clock = FakeClock()
    engine = Engine(
        store,
        clock=clock,
        policy=conformance_policy(),
        kinds={"conformance": KindPolicy(), "unsafe": KindPolicy(retry_safe=False)},
    )
    rows = [row for row in table_rows() if row[1] in OPERATOR_EVENTS]
    assert rows  # the spec has operator rows: this test takes each of them

    async def check_all() -> int:
        checked = 0
        async with AsyncEngine(engine, path=path) as aengine:
            assert aengine.uses_async_store == native
            for source, event, dest in rows:
                recipe = RECIPES[(source, event, dest)]
                job = reach(engine, clock, source, **recipe.submit)
                clock.advance(recipe.advance)
                before = await aengine.get(job.id)
                args = recipe.args(before)
                args.pop("recoveries", None)  # not an argument of Engine.requeue
                if event == "resolve":
                    args["result_json"] = json.dumps(json.loads(args.get("result_json", "null")))
                expected = decide(before, event, clock.now(), engine.policy, **args)
                await _apply(aengine, job.id, event, args)
                after = await aengine.get(job.id)
                assert after == expected.job, f"{source}->{event}->{dest}: differs from decide"
                assert after.state == dest
                trail = await aengine.history(job.id)
                assert trail[-1] == expected.entry, f"{source}->{event}: audit differs"
                checked += 1
        return checked

    assert asyncio.run(check_all()) == len(rows)


def test_a_submit_through_the_async_engine_is_the_core_submit_decision(
    store: tuple[Store, str, bool],
) -> None:
    """Submit (the row from no state to queued) through AsyncEngine: the stored record
    and its audit entry are `decide(None, "submit", ...)`'s for the same options."""
    store, path, _ = store
    clock = FakeClock()
    engine = Engine(store, clock=clock, policy=conformance_policy())
    options = {"priority": 3, "delay": 5.0, "max_attempts": 4, "idempotency_key": "k-1"}

    async def submit() -> tuple[Job, Job, list[AuditEntry]]:
        async with AsyncEngine(engine, path=path) as aengine:
            job = await aengine.submit("conformance", {"n": 1}, **options)
            again = await aengine.submit("conformance", {"n": 2}, **options)
            return job, again, await aengine.history(job.id)

    job, again, trail = asyncio.run(submit())
    expected = decide(
        None,
        "submit",
        clock.now(),
        engine.policy,
        id=job.id,
        kind="conformance",
        queue="default",
        payload_json='{"n":1}',
        priority=3,
        run_after=clock.now() + 5.0,
        max_attempts=4,
        max_recoveries=engine.policy.recovery.max_recoveries,
        retry_safe=False,
        retry_safe_pinned=False,
        deadline=None,
        timeout=None,
        idempotency_key="k-1",
        correlation_id=job.id,
        on_failed_dependency=None,
    )
    assert job == expected.job
    assert trail == [expected.entry]
    assert again == job  # the key's second submit returns the first job, unchanged
