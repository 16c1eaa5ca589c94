"""The PostgreSQL store, driven by hypothesis, agrees step by step with the memory store."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings

from adapters.memory import MemoryStore
from adapters.postgres import open_store
from fsm.ports import Store
from fsm.testing.stateful import run_comparison

pytestmark = pytest.mark.postgres


def test_postgres_agrees_with_the_memory_store_after_every_step(pg_url: str) -> None:
    counter = itertools.count()

    def postgres_store() -> Store:
        # a fresh schema per example in this test's database: fast to create and migrate
        return open_store(f"{pg_url}?schema=example_{next(counter)}&pool_max=2")

    # each example opens a fresh schema on a real server (about 1 s under load), so
    # PostgreSQL runs at most 20 examples of the active profile's step count
    active = settings()
    run_comparison(
        MemoryStore,
        postgres_store,
        settings=settings(active, max_examples=min(active.max_examples, 20)),
    )
