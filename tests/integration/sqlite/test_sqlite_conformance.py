"""The SQLite store passes the store conformance suite on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm.testing.conformance import (
    DroppableStoreConformance,
    PersistentStoreConformance,
    SharedStoreConformance,
    UrlStore,
)
from fsm.testing.conformance_deps import DependencyConformance
from fsm.testing.conformance_limits import LimitsConformance
from fsm.testing.conformance_progress import ProgressStoreConformance
from fsm.testing.conformance_unique import UniqueConformance


class TestSqliteConformance(
    UrlStore,
    SharedStoreConformance,
    PersistentStoreConformance,
    DroppableStoreConformance,
    ProgressStoreConformance,
    DependencyConformance,
    LimitsConformance,
    UniqueConformance,
):
    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        # a generous busy timeout: CI machines are loaded, and the concurrency
        # checks are about correctness, not about how long a writer waits
        self.url = f"sqlite:///{tmp_path / 'jobs.db'}?busy_timeout_ms=60000"
