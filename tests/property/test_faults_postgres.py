"""The fault suite (specs/invariants.md I1-I8, scenario S07) against real PostgreSQL.

A fresh database per test (the `pg_url` fixture); each example works in its own
queue, so examples never see each other's jobs. Fewer examples than memory and
SQLite (a quarter of the profile's: 50 x 50 steps under `ci`) to stay in the CI
budget: every step is several network round trips.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from fsm import open_store
from fsm.ports import Store
from fsm.testing import FaultSuite

pytestmark = pytest.mark.postgres

_PROFILE = settings()


class TestPostgresStoreUnderFaults(FaultSuite):
    """Every invariant holds after every step of 50 x 50 fault-injected steps (ci)."""

    settings = settings(_PROFILE, max_examples=max(10, _PROFILE.max_examples // 4))

    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> None:
        self.url = f"{pg_url}?pool_min=1&pool_max=2"

    def store_factory(self) -> Store:
        return open_store(self.url)
