"""Handlers of the retention tests' worker processes (they run no job: retention only)."""

from __future__ import annotations

from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()


@handlers.handler("noop")
def noop(ctx: Context) -> None:
    return None
