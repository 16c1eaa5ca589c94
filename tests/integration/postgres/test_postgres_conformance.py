"""The PostgreSQL store passes the store conformance suite on a real server."""

from __future__ import annotations

import pytest

from adapters.postgres import open_store
from fsm.ports import Store
from fsm.testing.conformance import PersistentStoreConformance, SharedStoreConformance

pytestmark = pytest.mark.postgres


class TestPostgresConformance(SharedStoreConformance, PersistentStoreConformance):
    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> None:
        # a fresh database per test; a small pool keeps the server's connections free
        self.url = f"{pg_url}?pool_max=4"

    def make_store(self) -> Store:
        return open_store(self.url)

    def store_url(self) -> str:
        return self.url

    def reopen_store(self) -> Store:
        return open_store(self.url)
