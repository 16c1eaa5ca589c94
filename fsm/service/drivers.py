"""Performers: answer a plan's requests (`fsm.service.plans`) from a store.

`fsm.service.plans.drive` runs a plan answering each request at once (a blocking
store), `adrive` awaiting each answer (an asyncio store). `perform_sync(kernel)`
answers from the kernel's blocking store through the kernel's write path, which tells
the observers; `AsyncPerformer` answers from a store's asyncio twin and tells the
kernel's observers itself (`Kernel.observed`), running what has no asyncio form
(dependency releases, the publisher) on a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import BadInput
from ..ports import AsyncJoinsTransactions, AsyncStore, Erasable, JoinsTransactions
from . import dependencies
from .kernel import Kernel
from .plans import Insert, Read, Record, Release, Request, Write

T = TypeVar("T")
R = TypeVar("R")


def _cannot_join(store: object) -> BadInput:
    return BadInput(
        f"{type(store).__name__} cannot submit inside a caller's transaction "
        "(conn=...): use a SQLite or PostgreSQL store"
    )


def _cannot_erase(store: object) -> BadInput:
    return BadInput(f"{type(store).__name__} cannot erase jobs (no `erase`)")


def perform_sync(kernel: Kernel) -> Callable[[Request], Any]:
    """Answer requests from the kernel's blocking store, through its write path."""
    store = kernel.store

    def perform(request: Request) -> Any:
        if isinstance(request, Read):
            return store.get(request.job_id)
        if isinstance(request, Write):
            if request.erase:
                if not isinstance(store, Erasable):
                    raise _cannot_erase(store)
                return kernel.erase(request.decision)
            return kernel.apply([request.decision])[0]
        if isinstance(request, Record):
            kernel.record(request.job, request.entry)
            return None
        if isinstance(request, Insert):
            if request.conn is not None and not isinstance(store, JoinsTransactions):
                raise _cannot_join(store)
            return kernel.insert(request.decisions, request.conn)
        if isinstance(request, Release):
            return dependencies.settled(kernel, request.jobs)
        assert kernel.publisher is not None
        kernel.publisher.publish(list(request.jobs))
        return None

    return perform


class AsyncPerformer:
    """Answer requests from `store` (an asyncio twin of the kernel's store); what has
    no asyncio form goes to `in_thread(fn, *args)`."""

    def __init__(
        self,
        kernel: Kernel,
        store: AsyncStore,
        in_thread: Callable[..., Awaitable[Any]],
    ) -> None:
        self.kernel = kernel
        self.store = store
        self.in_thread = in_thread

    async def __call__(self, request: Request) -> Any:
        kernel, store = self.kernel, self.store
        if isinstance(request, Read):
            return await store.get(request.job_id)
        if isinstance(request, Write):
            decision = request.decision
            if request.erase:
                written = await store.erase(decision)
            else:
                (written,) = await store.apply([decision])
            kernel.observed([decision], [written])
            return written
        if isinstance(request, Record):
            await store.record([request.entry])
            kernel.observers.on_transition(request.job, request.entry)
            return None
        if isinstance(request, Insert):
            decisions = list(request.decisions)
            if request.conn is None:
                jobs = await store.insert(decisions, kernel.capacity())
            else:
                if not isinstance(store, AsyncJoinsTransactions):
                    raise _cannot_join(store)
                jobs = await store.insert_in(request.conn, decisions, kernel.capacity())
            kernel.inserted(decisions, jobs)
            return jobs
        if isinstance(request, Release):
            return await self.in_thread(dependencies.settled, kernel, request.jobs)
        assert kernel.publisher is not None
        return await self.in_thread(kernel.publisher.publish, list(request.jobs))
