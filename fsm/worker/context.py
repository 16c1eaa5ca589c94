"""What a handler sees (`Context`), at the address applications import it from.

The code lives in `fsm.handling` (`attempt`: the context and how a handler's exit
becomes an `Outcome`; `child`: what an executor's child runs), below the worker, so
that executors, which are adapters, run handlers without importing the worker.
"""

from __future__ import annotations

from ..handling.attempt import (
    CANCEL_POLL,
    TYPED,
    Context,
    Handler,
    JobCancelled,
    Marker,
    handler_path,
    is_async,
    resolve,
    run_attempt,
    run_attempt_async,
    run_attempt_in_new_loop,
    typed_path,
)
from ..handling.child import MARK_OP, mark_reply, raise_mark_reply, run_target

__all__ = [
    "CANCEL_POLL",
    "MARK_OP",
    "TYPED",
    "Context",
    "Handler",
    "JobCancelled",
    "Marker",
    "handler_path",
    "is_async",
    "mark_reply",
    "raise_mark_reply",
    "resolve",
    "run_attempt",
    "run_attempt_async",
    "run_attempt_in_new_loop",
    "run_target",
    "typed_path",
]
