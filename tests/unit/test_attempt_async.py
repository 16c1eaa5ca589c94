"""An `async def` handler's end is classified exactly as a sync handler's (one home)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from fsm.errors import Ambiguous, Permanent, Retry
from fsm.ports import Outcome
from fsm.records import Job, Owner
from fsm.worker.context import (
    Context,
    JobCancelled,
    is_async,
    run_attempt,
    run_attempt_async,
)
from fsm.worker.handlers import Handlers


def _job(payload_json: str = '{"n": 1}') -> Job:
    return Job(
        id="01J0000000000000000000000C",
        kind="k",
        queue="default",
        payload_json=payload_json,
        state="running",
        created_at=1.0,
        updated_at=2.0,
        run_after=1.0,
        fence=2,
        attempt=1,
        owner=Owner(host="h", pid=7, incarnation="i"),
    )


ENDINGS: dict[str, Callable[[Context], Any]] = {
    "returns": lambda ctx: {"n": ctx.payload["n"]},
    "not json": lambda ctx: {1, 2},
    "retry": lambda ctx: (_ for _ in ()).throw(Retry(after=3)),
    "permanent": lambda ctx: (_ for _ in ()).throw(Permanent("no")),
    "ambiguous": lambda ctx: (_ for _ in ()).throw(Ambiguous("maybe")),
    "cancelled": lambda ctx: (_ for _ in ()).throw(JobCancelled("stop")),
    "crash": lambda ctx: (_ for _ in ()).throw(RuntimeError("boom")),
}


def _same(outcome: Outcome) -> tuple[str, str | None, str | None, float | None]:
    error = (outcome.error or "").split("\n")[0] or None  # tracebacks name their own frames
    return (outcome.status, outcome.result_json, error, outcome.delay)


@pytest.mark.parametrize("how", list(ENDINGS))
def test_an_async_handler_ends_exactly_as_the_same_sync_handler(how: str) -> None:
    sync = ENDINGS[how]

    async def asynchronous(ctx: Context) -> Any:
        await asyncio.sleep(0)
        return sync(ctx)

    a = run_attempt(sync, Context(_job(), threading.Event()))
    b = asyncio.run(run_attempt_async(asynchronous, Context(_job(), threading.Event())))
    c = run_attempt(asynchronous, Context(_job(), threading.Event()))  # a loop of its own

    assert _same(a) == _same(b) == _same(c)


def test_a_payload_that_cannot_be_decoded_fails_the_async_attempt_before_it_runs() -> None:
    ran = []

    async def handler(ctx: Context) -> None:
        ran.append(1)

    out = asyncio.run(run_attempt_async(handler, Context(_job("{bad"), threading.Event())))
    assert out.status == "permanent"
    assert not ran


def test_the_cancel_token_cancels_an_async_handler_run_on_a_loop_of_its_own() -> None:
    token = threading.Event()
    cleaned = threading.Event()

    async def handler(ctx: Context) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.set()

    threading.Timer(0.1, token.set).start()
    out = run_attempt(handler, Context(_job(), token))
    assert out.status == "cancelled"
    assert cleaned.is_set()


def test_registration_knows_an_async_handler() -> None:
    handlers = Handlers()

    @handlers.handler("a")
    async def a(ctx: Context) -> None: ...

    @handlers.handler("s")
    def s(ctx: Context) -> None: ...

    class Callable_:
        async def __call__(self, ctx: Context) -> None: ...

    assert handlers["a"].asynchronous
    assert not handlers["s"].asynchronous
    assert is_async(Callable_())
