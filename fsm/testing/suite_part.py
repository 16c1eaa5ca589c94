"""The base of the parts mixed into `fsm.testing.conformance.StoreConformance`.

A part (schedules, claim-and-start) is written against the store and the engine
that `StoreConformance` gives; these stubs name them for the type checker.
"""

from __future__ import annotations

from ..clock import FakeClock
from ..ports import Store
from ..service.engine import Engine


class SuitePart:
    """Mixed into `StoreConformance` (which gives `store`, `engine`)."""

    concurrent_threads: int

    @property
    def store(self) -> Store:
        raise NotImplementedError  # StoreConformance

    def engine(self, store: Store | None = None) -> tuple[Engine, FakeClock]:
        raise NotImplementedError  # StoreConformance
