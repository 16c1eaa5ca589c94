"""The fault suite's own reads and the machine's clean-up (docs/fault-suites.md): what
it checks is read in one scan, not one `get` per job, and an example that ends leaves
no finished job behind in a store the examples share."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

from adapters.memory import MemoryStore
from fsm.testing.faults import run_models
from fsm.testing.faults_late import fault_machine
from fsm.testing.faults_machine import FaultMachine, FaultStats
from fsm.testing.faults_models import Coverage, handles
from fsm.testing.profiles import run_machine


class CountingStore(MemoryStore):
    """A memory store that counts the jobs read one by one, and the scans."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.scans = 0

    def get(self, job_id: str) -> Any:
        self.gets += 1
        return super().get(job_id)

    def scan(self, request: Any) -> Any:
        self.scans += 1
        return super().scan(request)


def _machine(store: MemoryStore) -> FaultMachine:
    return fault_machine(lambda: store, stats=FaultStats())()


@pytest.mark.parametrize("late", [False, True], ids=["now", "after-retention"])
def test_the_prune_rule_reads_the_examples_jobs_in_two_scans_not_one_get_per_job(
    late: bool,
) -> None:
    # given an example with six jobs, none finished (so none may be pruned, however old)
    store = CountingStore()
    machine = _machine(store)
    machine.submit_batch([0, 1, 2, 3, 4, 5])
    store.gets = 0
    # when the prune rule runs
    machine.prune(late)
    # then it read no job by id (before: two gets per job) and forgot none
    assert store.gets == 0
    assert len(machine.jobs) == 6


def test_a_start_step_reads_its_job_only_where_a_check_or_the_engine_needs_it() -> None:
    # given an example whose worker holds a leased job
    store = CountingStore()
    machine = _machine(store)
    machine.submit_batch([0, 1])
    machine.claim(0, 1)
    store.gets = 0
    # when the worker starts it
    machine.start(0, 0)
    # then the job was read three times: the record the report is judged against, the
    # Engine's own read, and the worker's re-read after the report (its kind, which
    # the start's kind policy needs, comes from what was submitted)
    assert store.gets == 3


def test_an_example_that_ends_leaves_no_finished_job_in_a_shared_store() -> None:
    # given one store shared by every example (as the PostgreSQL schema is)
    shared = MemoryStore()
    stats = FaultStats()
    machine = fault_machine(lambda: shared, stats=stats)
    machine.store_factory = staticmethod(lambda: _Unclosed(shared))  # type: ignore[assignment]
    # when a few examples run (each in its own queue)
    run_machine(
        machine,
        settings=settings(max_examples=8, stateful_step_count=12, database=None, deadline=None),
    )
    # then each example that ran to its end (its queue settled: every job left in it
    # finished or parked) took its finished jobs with it; an example hypothesis cut
    # short before its final check leaves its queue as it was
    assert stats.examples >= 1
    states: dict[str, set[str]] = {}
    for (queue, state), n in shared.counts().items():
        if n:
            states.setdefault(queue, set()).add(state)
    finished = {"succeeded", "failed", "cancelled"}
    settled = {q: s for q, s in states.items() if s <= finished | {"investigate"}}
    assert all(not s & finished for s in settled.values()), settled


class _Unclosed:
    """The shared store, which an example's end must not close."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("model", ["limits", "races"])
def test_a_model_reads_its_examples_jobs_by_scanning_their_queue(model: str) -> None:
    # given the model on one memory store that counts its reads
    store = CountingStore()
    # when it runs at the quick size
    run_models(
        lambda: handles(lambda: store, shared=True),
        size="quick",
        stats=FaultStats(),
        coverage=Coverage(),
        seed=1,
        only=[model],
    )
    # then its checks read the jobs in scans: what is left by id is the Engine's own
    # reads for its transitions (before, one get per job per check: limits 2223 gets
    # and no scan, races 457 gets and 50 scans)
    assert store.scans > 0
    assert store.gets < store.scans
