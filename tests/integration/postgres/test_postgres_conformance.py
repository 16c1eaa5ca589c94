"""The PostgreSQL store passes the store conformance suite on a real server."""

from __future__ import annotations

import pytest

from adapters.postgres import open_store
from fsm.ports import Store
from fsm.testing.conformance import PersistentStoreConformance, SharedStoreConformance

pytestmark = pytest.mark.postgres


class TestPostgresConformance(SharedStoreConformance, PersistentStoreConformance):
    @pytest.fixture(autouse=True)
    def _schema(self, pg_schema_url: str) -> None:
        # a fresh schema per test (one database per module); a small pool keeps the
        # server's connections free for the other tests running beside these
        self.url = f"{pg_schema_url}&pool_max=4"

    def make_store(self) -> Store:
        return open_store(self.url)

    def store_url(self) -> str:
        return self.url

    def reopen_store(self) -> Store:
        return open_store(self.url)
