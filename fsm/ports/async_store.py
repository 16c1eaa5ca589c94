"""The asyncio twin of a store, used by `fsm.service.aio.AsyncEngine`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..errors import VersionConflict
from ..records import AuditEntry, Decision, Job
from .store import Capacity, ScanRequest


@runtime_checkable
class AsyncStore(Protocol):
    """The part of the Store that `fsm.service.aio.AsyncEngine` uses, awaited (its methods mean
    what the Store's of the same name mean). A store offers it through `HasAsyncStore`."""

    async def open(self) -> None:
        """Get ready on the running event loop (open connection pools)."""
        ...

    async def insert(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]: ...
    async def get(self, job_id: str) -> Job | None: ...
    async def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]: ...
    async def erase(self, decision: Decision) -> Job | VersionConflict: ...
    async def record(self, entries: Sequence[AuditEntry]) -> None: ...
    async def scan(self, request: ScanRequest) -> list[Job]: ...
    async def history(self, job_id: str) -> list[AuditEntry]: ...
    async def counts(self) -> dict[tuple[str, str], int]: ...
    async def aclose(self) -> None: ...


@runtime_checkable
class AsyncJoinsTransactions(Protocol):
    """An asyncio twin that can insert inside the caller's open transaction on an
    asyncio connection (`AsyncEngine.submit(..., conn=...)`): `JoinsTransactions`,
    awaited."""

    async def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]: ...


@runtime_checkable
class HasAsyncStore(Protocol):
    """A store with an asyncio twin over the same data (PostgreSQL: psycopg's async pool).

    `AsyncEngine` uses the twin instead of running the blocking store on threads."""

    def async_store(self) -> AsyncStore:
        """A new twin, not yet open; the caller opens it on its loop and closes it."""
        ...
