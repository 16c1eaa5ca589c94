"""Bad input at the engine's door, sync and async (issue 37 item 9): `submit_many` names
the item that is not a (kind, payload, options) tuple, and `cancel`, an operator event of
the spec like requeue, resolve and erase, refuses an empty actor or reason. Nothing is
written in either case. On the memory store and on PostgreSQL (the asyncio path)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.memory import MemoryStore
from fsm import AsyncEngine, Engine, open_store
from fsm.errors import BadInput, OperatorError
from fsm.lifecycle.spec import lifecycle
from fsm.ports import ScanRequest

ALL = ("queued", "cancelled")


@pytest.fixture(params=["memory", "postgres"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "memory":
        e = Engine(MemoryStore())
    else:
        e = Engine(open_store(str(request.getfixturevalue("pg_url"))))
    yield e
    e.store.close()


def _stored(engine: Engine) -> int:
    return len(engine.scan(ScanRequest(states=ALL, limit=100)))


@pytest.mark.parametrize(
    ("items", "named"),
    [
        ([1, 2], "item 0 must be a (kind, payload, options) tuple; got 1"),
        ([("k", None, {}), "k"], "item 1 must be a (kind, payload, options) tuple; got 'k'"),
        ([("k", None, {}), ("k", None)], "item 1 must be a (kind, payload, options) tuple"),
        ([("k", None, [])], "item 0: options must be a mapping"),
    ],
)
def test_submit_many_names_the_item_that_is_not_a_job_sync_and_async(
    engine: Engine, items: list[Any], named: str
) -> None:
    with pytest.raises(BadInput) as sync:
        engine.submit_many(items)
    assert named in str(sync.value)

    async def submit() -> None:
        aengine = AsyncEngine(engine)
        try:
            await aengine.submit_many(items)
        finally:
            await aengine.aclose()

    with pytest.raises(BadInput) as async_:
        asyncio.run(submit())
    assert named in str(async_.value)
    assert _stored(engine) == 0


def test_cancel_is_an_operator_event_of_the_spec() -> None:
    operators = {e for e, spec in lifecycle().events.items() if spec.operator}
    assert {"cancel", "requeue", "resolve", "erase"} <= operators


@pytest.mark.parametrize(
    ("actor", "reason", "named"),
    [("", "r", "actor"), ("  ", "r", "actor"), ("ops", "", "reason"), ("ops\n", "r", "actor")],
)
def test_cancel_refuses_an_empty_or_unprintable_actor_or_reason_sync_and_async(
    engine: Engine, actor: str, reason: str, named: str
) -> None:
    job = engine.submit("k", None)
    with pytest.raises(OperatorError, match=named):
        engine.cancel(job.id, actor=actor, reason=reason)

    async def cancel() -> None:
        aengine = AsyncEngine(engine)
        try:
            await aengine.cancel(job.id, actor=actor, reason=reason)
        finally:
            await aengine.aclose()

    with pytest.raises(OperatorError, match=named):
        asyncio.run(cancel())
    assert engine.get(job.id) == job
    assert [e.event for e in engine.history(job.id)] == ["submit"]
    done = engine.cancel(job.id, actor="ops", reason="no longer needed")
    assert done.state == "cancelled"
