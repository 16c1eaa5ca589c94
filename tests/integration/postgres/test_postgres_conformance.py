"""The PostgreSQL store passes the store conformance suite on a real server."""

from __future__ import annotations

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

pytestmark = pytest.mark.postgres


class TestPostgresConformance(
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
    def _schema(self, pg_schema_url: str) -> None:
        # a fresh schema per test (one database per module); a small pool keeps the
        # server's connections free for the other tests running beside these
        self.url = f"{pg_schema_url}&pool_max=4"
