"""The fault suite (specs/invariants.md I1-I8, scenario S07) against the memory store."""

from __future__ import annotations

from adapters.memory import MemoryStore
from fsm.ports import Store
from fsm.testing import FaultSuite


class TestMemoryStoreUnderFaults(FaultSuite):
    """Every invariant holds after every step of 200 x 50 fault-injected steps (ci)."""

    def store_factory(self) -> Store:
        return MemoryStore()
