"""Handlers for the schedule tests' worker processes: `handlers` declares no schedule;
`declared` declares one in code (`beat`, every 0.2 s, into queue `beats`)."""

from __future__ import annotations

from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()
declared = Handlers()


@handlers.handler("noop")
def noop(ctx: Context) -> None:
    return None


@declared.periodic(every=0.2, subsecond=True, payload={"from": "code"}, queue="beats")
@declared.handler("beat", queue="beats")
def beat(ctx: Context) -> None:
    return None
