"""Set-up and clean-up hooks of a worker: `worker_init`, `worker_exit`, `child_init`.

- `worker_init()` runs once in the worker process, before the executor starts and
  before any job is leased (open a connection pool, read a configuration);
- `child_init()` runs once in each process that runs handlers, before its first job:
  in each child of a process executor (named "module:qualname" and imported there,
  as handlers are; a replaced child runs it again, being a new process), or once in
  the worker process itself for the thread and asyncio executors (warm a model);
- `worker_exit()` runs once in the worker process after the worker has stopped (its
  jobs drained or left to recovery, the executor closed), when `worker_init` ran.

A hook that raises stops the worker: `Worker.run()` raises `HookFailed` naming the
hook, its function and the error (the CLI prints that one line and exits with status
2). A `child_init` that fails in a child started later (to replace a dead one) stops
the worker the same way, after a drain (the child runs it: `fsm.handling.child`).
docs/workers.md, "Set-up and clean-up hooks".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import attrs

from ..errors import HookFailed
from ..handling.attempt import handler_path
from ..handling.child import describe

log = logging.getLogger(__name__)

__all__ = [
    "HOOK_NAMES",
    "Hook",
    "HookFailed",
    "Hooks",
    "InitsChildren",
    "call_hook",
    "check_hook",
]

Hook = Callable[[], object]
HOOK_NAMES = ("worker_init", "worker_exit", "child_init")


def call_hook(hook: str, fn: Hook) -> None:
    """Run one hook in this process; raise HookFailed naming it if it raises."""
    target = handler_path(fn)
    log.info("worker: running %s hook %s", hook, target)
    try:
        fn()
    except Exception as err:
        raise HookFailed(hook, target, describe(err)) from err


@runtime_checkable
class InitsChildren(Protocol):
    """An executor whose handlers run in processes of their own (the process executor):
    it runs `child_init` (by name) once in each before its first job, and calls
    `on_fatal` with the error when a child started later fails it."""

    def init_children(self, target: str, on_fatal: Callable[[str], None]) -> None: ...


def check_hook(hook: str, fn: object) -> Hook:
    if not callable(fn):
        raise TypeError(f"{hook} hook is not callable: {fn!r}")
    return fn


@attrs.frozen
class Hooks:
    """A worker's hooks (each optional); declared on `Handlers` or given to `Worker`."""

    worker_init: Hook | None = None
    worker_exit: Hook | None = None
    child_init: Hook | None = None

    def merged(self, other: Hooks) -> Hooks:
        """`other`'s hooks where it has them; a hook set differently on both is refused."""
        out = {}
        for name in HOOK_NAMES:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is not None and theirs is not None and mine is not theirs:
                raise TypeError(f"{name} hook given twice: {mine!r} and {theirs!r}")
            out[name] = theirs if theirs is not None else mine
        return Hooks(**out)
