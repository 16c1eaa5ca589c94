"""The fault suite (specs/invariants.md I1-I8, scenario S07) against real SQLite files.

One fresh database file per example. The files are scratch, so they use
`synchronous=NORMAL` (WAL without an fsync per commit): durability across power
loss is not what this suite checks; the PersistentStoreConformance suite does.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fsm import open_store
from fsm.ports import Store
from fsm.testing import FaultSuite


class TestSqliteStoreUnderFaults(FaultSuite):
    """Every invariant holds after every step of 200 x 50 fault-injected steps (ci)."""

    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.numbers = itertools.count()

    def store_factory(self) -> Store:
        path = self.dir / f"example-{next(self.numbers)}.db"
        return open_store(f"sqlite:///{path}?synchronous=NORMAL")
