"""The fault suite (specs/invariants.md I1-I8, scenario S07) against real SQLite files.

One fresh database file per example, on tmpfs (/dev/shm) when there is one, with
`synchronous=NORMAL`: the files are scratch, and durability across power loss is
not what this suite checks (the PersistentStoreConformance suite does).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm import open_store
from fsm.ports import Store
from fsm.testing import FaultSuite

SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class TestSqliteStoreUnderFaults(FaultSuite):
    """Every invariant holds after every step of 200 x 50 fault-injected steps (ci)."""

    @pytest.fixture(autouse=True)
    def _scratch(self) -> Iterator[None]:
        with tempfile.TemporaryDirectory(prefix="jobfsm-faults-", dir=SCRATCH) as tmp:
            self.dir = Path(tmp)
            self.numbers = itertools.count()
            yield

    def store_factory(self) -> Store:
        path = self.dir / f"example-{next(self.numbers)}.db"
        return open_store(f"sqlite:///{path}?synchronous=NORMAL")
