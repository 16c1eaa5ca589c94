"""The store comparison machine itself: memory against memory must always agree.

If this fails, the machine (not a store) is nondeterministic: every other store's
comparison would report false differences.
"""

from __future__ import annotations

from adapters.memory import MemoryStore
from fsm.testing.stateful import run_comparison


def test_the_comparison_machine_finds_two_memory_stores_in_agreement() -> None:
    run_comparison(MemoryStore, MemoryStore, scale=0.1)
