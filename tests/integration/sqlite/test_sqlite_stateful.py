"""The SQLite store, driven by hypothesis, agrees step by step with the memory store."""

from __future__ import annotations

import itertools
from pathlib import Path

from adapters.memory import MemoryStore
from adapters.sqlite import open_store
from fsm.ports import Store
from fsm.testing.stateful import run_comparison


def test_sqlite_agrees_with_the_memory_store_after_every_step(tmp_path: Path) -> None:
    counter = itertools.count()

    def sqlite_store() -> Store:
        # NORMAL sync: this test compares semantics; durability has its own kill -9 test.
        return open_store(f"sqlite:///{tmp_path / f'{next(counter)}.db'}?synchronous=NORMAL")

    run_comparison(MemoryStore, sqlite_store, scale=0.25)
