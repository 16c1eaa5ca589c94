"""Handlers for the metrics test's worker process (`--app tests.dashboard.handlers:handlers`)."""

from __future__ import annotations

from typing import Any

from fsm.errors import Ambiguous, Permanent, Retry
from fsm.worker.handlers import Handlers

handlers = Handlers()


@handlers.handler("m.ok")
def ok(ctx: Any) -> dict[str, int]:
    return {"n": int(ctx.payload.get("n", 0))}


@handlers.handler("m.bad")
def bad(ctx: Any) -> None:
    raise Permanent("no such account")


@handlers.handler("m.flaky")
def flaky(ctx: Any) -> str:
    if ctx.attempt < 2:
        raise Retry(after=0.0, message="not yet")
    return "done"


@handlers.handler("m.unsure")
def unsure(ctx: Any) -> None:
    raise Ambiguous("the charge may have gone through")
