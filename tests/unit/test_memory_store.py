"""The memory store, the reference semantics, passes the store conformance suite."""

from __future__ import annotations

from adapters.memory import MemoryStore
from fsm.ports import Store
from fsm.testing.conformance import StoreConformance


class TestMemoryStoreConformance(StoreConformance):
    """Memory is one process only: the cross-process and reopen checks do not apply."""

    concurrent_jobs = 5000

    def make_store(self) -> Store:
        return MemoryStore()
