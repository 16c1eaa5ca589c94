"""Blocking writes of the service: a plan run against the kernel's store, and a
decision on a record exactly as it was read.

`run(kernel, plan)` drives a plan (`fsm.service.plans`) with `perform_sync`: the
Engine and every maintenance service run plans through it. `decide_seen` is what a sweeper
does with a record it judged: compare-and-set on the version it read, so a verdict
about one owner can never take a lease a newer owner holds.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

from ..errors import IllegalTransition, VersionConflict
from ..records import Job
from . import dependencies
from .drivers import perform_sync
from .kernel import Kernel
from .plans import drive

T = TypeVar("T")


def run(kernel: Kernel, plan: Generator[Any, Any, T]) -> T:
    """Drive `plan` against the kernel's blocking store (releases included)."""
    return drive(plan, perform_sync(kernel))


def decide_seen(kernel: Kernel, job: Job, event: str, **args: Any) -> Job | None:
    """Apply `event` to `job` exactly as it was read (compare-and-set on that version)
    and release what it lets go; None when the job moved since or the event does not
    apply. Arguments that are None are left out."""
    args = {k: v for k, v in args.items() if v is not None}
    try:
        decision = kernel.decide(job, event, kernel.clock.now(), **args)
    except IllegalTransition:
        return None
    (written,) = kernel.apply([decision])
    if isinstance(written, VersionConflict):
        return None
    dependencies.settled(kernel, [written])
    return written
