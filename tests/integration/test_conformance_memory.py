"""The memory store: the comparison machine on two memory stores, the conformance
suite with schema removal, and its URL errors."""

from __future__ import annotations

import pytest

from adapters.memory import MemoryStore, open_store
from fsm.errors import BadStoreURL
from fsm.ports import Store
from fsm.registry import open_store as open_by_url
from fsm.testing.conformance import DroppableStoreConformance
from fsm.testing.conformance_deps import DependencyConformance
from fsm.testing.conformance_limits import LimitsConformance
from fsm.testing.conformance_progress import ProgressStoreConformance
from fsm.testing.conformance_unique import UniqueConformance
from fsm.testing.stateful import run_comparison

SENTINEL = "S3cr3t-Sentinel"


def test_the_comparison_machine_finds_two_memory_stores_in_agreement() -> None:
    # If this fails, the machine (not a store) is nondeterministic: every other
    # store's comparison would report false differences.
    run_comparison(MemoryStore, MemoryStore, scale=0.1)


class TestMemoryStoreConformance(
    DroppableStoreConformance,
    ProgressStoreConformance,
    DependencyConformance,
    LimitsConformance,
    UniqueConformance,
):
    """The whole suite plus drop_schema; memory is one process: no cross-process checks."""

    concurrent_jobs = 5000

    def make_store(self) -> Store:
        return MemoryStore()

    def store_after_drop(self) -> Store:
        return self.store  # the same object, emptied


@pytest.mark.parametrize(
    "url",
    [f"memory://u:{SENTINEL}@x", f"memory://?password={SENTINEL}", f"memory:u:{SENTINEL}@x"],
)
def test_no_memory_url_error_shows_a_password(url: str) -> None:
    for opener in (open_store, open_by_url):
        with pytest.raises(BadStoreURL) as info:
            opener(url)
        assert SENTINEL not in str(info.value)
        assert SENTINEL not in repr(info.value)
        assert info.value.__cause__ is None
