"""The fault suite's async mode: submits and operator actions through `AsyncEngine`.

With `fault_machine(..., engine="async")` the machine's submit and operator
rules (submit, submit_dependent, cancel, requeue, resolve) go through
`fsm.service.aio.AsyncEngine(path="async")`, so the loops of `fsm.service.plans` run under
`adrive` over the store's asyncio twin, while the simulated workers, sweeps and
invariant checks keep the blocking Engine (as a real worker does).

The twin is wrapped by `FaultyAsyncStore`, which asks the machine's `FaultyStore`
whether a fault fires (`before`, `race`, `after`): one armed fault, one fired
counter, whichever side makes the call. So "what a fault is" has one home.

The machine owns one event loop per example (`AsyncClient`); `close` closes the
twin's pool on that loop, then the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import BadInput, VersionConflict
from ..ports import AsyncStore, Capacity, HasAsyncStore, ScanRequest, Store
from ..records import AuditEntry, Decision, Job
from ..service.aio import AsyncEngine
from ..service.engine import Engine
from .faults_store import ErasingFaultyStore, FaultyStore

T = TypeVar("T")

#: how the machine's submit and operator rules reach the store
ENGINES = ("sync", "async")
#: threads of the AsyncEngine (it needs them only for dependency releases)
ASYNC_THREADS = 2


class FaultyAsyncStore:
    """`AsyncStore` forwarding to `inner`; the faults are `faults`' (a FaultyStore's)."""

    def __init__(self, inner: AsyncStore, faults: FaultyStore) -> None:
        self.inner = inner
        self.faults = faults

    async def open(self) -> None:
        await self.inner.open()

    async def insert(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        when = self.faults.before("insert")
        out = await self.inner.insert(decisions, capacity)
        self.faults.after("insert", when)
        return out

    async def get(self, job_id: str) -> Job | None:
        self.faults.before("get")
        return await self.inner.get(job_id)

    async def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        when = self.faults.before("apply")
        self.faults.race(decisions)
        out = await self.inner.apply(decisions)
        self.faults.after("apply", when)
        return out

    async def erase(self, decision: Decision) -> Job | VersionConflict:
        return await self.inner.erase(decision)

    async def record(self, entries: Sequence[AuditEntry]) -> None:
        when = self.faults.before("record")
        await self.inner.record(entries)
        self.faults.after("record", when)

    async def scan(self, request: ScanRequest) -> list[Job]:
        self.faults.before("scan")
        return await self.inner.scan(request)

    async def history(self, job_id: str) -> list[AuditEntry]:
        return await self.inner.history(job_id)

    async def counts(self) -> dict[tuple[str, str], int]:
        return await self.inner.counts()

    async def aclose(self) -> None:
        await self.inner.aclose()


class FaultyTwinStore(FaultyStore):
    """A FaultyStore whose asyncio twin (`HasAsyncStore`) injects the same faults."""

    def __init__(self, inner: Store, *args: Any, **kwargs: Any) -> None:
        if not isinstance(inner, HasAsyncStore):
            raise BadInput(
                f"the fault suite's async engine mode needs a store with an asyncio twin "
                f"(PostgreSQL); {type(inner).__name__} has none: use engine='sync'"
            )
        super().__init__(inner, *args, **kwargs)
        self.twin_of: HasAsyncStore = inner

    def async_store(self) -> AsyncStore:
        return FaultyAsyncStore(self.twin_of.async_store(), self)


class ErasingFaultyTwinStore(FaultyTwinStore, ErasingFaultyStore):
    """A FaultyTwinStore over a store that can erase (`ErasingFaultyStore`)."""


class AsyncClient:
    """The machine's blocking view of an `AsyncEngine(path="async")` on its own loop."""

    def __init__(self, engine: Engine) -> None:
        self.loop = asyncio.new_event_loop()
        self.aengine = AsyncEngine(engine, max_threads=ASYNC_THREADS, path="async")

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(call)

    def submit(self, kind: str, payload: Any = None, **opts: Any) -> Job:
        return self._run(self.aengine.submit(kind, payload, **opts))

    def submit_many(self, items: Sequence[tuple[str, Any, Mapping[str, Any]]]) -> list[Job]:
        return self._run(self.aengine.submit_many(items))

    def cancel(self, job_id: str, *, actor: str, reason: str) -> Job:
        return self._run(self.aengine.cancel(job_id, actor=actor, reason=reason))

    def requeue(self, job_id: str, *, actor: str, reason: str, attempts: int) -> Job:
        return self._run(
            self.aengine.requeue(job_id, actor=actor, reason=reason, attempts=attempts)
        )

    def resolve(self, job_id: str, *, outcome: str, actor: str, reason: str) -> Job:
        return self._run(self.aengine.resolve(job_id, outcome=outcome, actor=actor, reason=reason))

    def erase(self, job_id: str, *, actor: str, reason: str) -> Job:
        return self._run(self.aengine.erase(job_id, actor=actor, reason=reason))

    def close(self) -> None:
        """Close the twin's pool on the loop (psycopg_pool needs its loop), then the loop."""
        try:
            self._run(self.aengine.aclose())
        finally:
            self.loop.close()
