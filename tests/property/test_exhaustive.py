"""The exhaustive mode (fsm/testing/explore.py): every interleaving of a small world."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from fsm.errors import BadInput
from fsm.testing.explore import SCOPES, Exploration, explore, replay
from fsm.testing.explore_world import World, replay_world

from . import mutants

#: the scope CI explores (docs/fault-suites.md states its figures)
CI_SCOPE = "reconcile"

#: asks xdist (--dist loadgroup) for one worker for the tests that read the tiny exploration
ON_TINY = pytest.mark.xdist_group("exhaustive-tiny")


@pytest.fixture(scope="module")
def tiny() -> Exploration:
    """The tiny scope explored on the memory store, once for the tests that compare with it."""
    return explore("tiny")


@ON_TINY
def test_the_tiny_scope_is_explored_completely_and_every_invariant_holds(
    tiny: Exploration,
) -> None:
    # when every interleaving of the tiny world is explored on the memory store
    found = tiny
    # then it finished, found nothing broken, and counted what it explored
    assert found.ok, found.failure
    assert found.complete
    assert found.states > 100
    assert found.transitions > found.states


@ON_TINY
def test_the_exploration_is_a_function_of_the_scope(tiny: Exploration) -> None:
    # the same scope explored twice reaches the same number of states and transitions
    first, second = tiny, explore("tiny")
    assert (first.states, first.transitions, first.depth) == (
        second.states,
        second.transitions,
        second.depth,
    )


def test_symmetric_worlds_share_one_key() -> None:
    # given two worlds where different workers claimed the job
    from adapters.memory import MemoryStore

    scope = SCOPES["tiny"]
    a, _ = replay_world(scope, MemoryStore, ("claim 0",))
    b, _ = replay_world(scope, MemoryStore, ("claim 1",))
    c, _ = replay_world(scope, MemoryStore, ("claim 0", "start 0 0"))
    # then the workers' permutation makes them one state, and a real move is another
    assert a.key() == b.key()
    assert a.key() != c.key()


@pytest.mark.slow  # every replayed world is a fresh SQLite file: 10x the memory store's time
@ON_TINY
def test_the_tiny_scope_on_sqlite_reaches_the_states_it_reaches_on_memory(
    tiny: Exploration,
) -> None:
    found = explore("tiny", "sqlite:///scratch.db")
    assert found.ok, found.failure
    assert found.states == tiny.states


def test_an_unknown_scope_or_store_is_refused_before_anything_runs() -> None:
    with pytest.raises(BadInput, match="unknown exhaustive scope"):
        explore("huge")
    with pytest.raises(BadInput, match="memory:// or sqlite:///"):
        explore("tiny", "postgresql://postgres@127.0.0.1/postgres")


def test_a_trace_that_breaks_nothing_replays_cleanly() -> None:
    replay("tiny", ["claim 0", "advance", "sweep 0", "claim 1", "start 0 0"])
    world = World(SCOPES["tiny"], __import__("adapters.memory").memory.MemoryStore)
    assert "claim 0" in world.enabled()
    world.close()


@pytest.mark.slow  # a copy of the tree, patched, and `jobfsm faults` run from it
@pytest.mark.parametrize("name", ["core-stale-fence-accepted"])
def test_a_seeded_bug_gives_the_shortest_failing_trace_as_a_runnable_program(name: str) -> None:
    # given the tree with one own mutant applied (a report one fence behind is accepted)
    from benchmarks.mutation import PG_DEFAULT, run_one

    (patch,) = [p for p in mutants.PATCHES if p.name == name]
    # when `jobfsm faults --exhaustive --scope tiny` runs from that copy
    row = run_one(
        patch,
        "memory",
        size="default",
        timeout=300,
        pg=PG_DEFAULT,
        extra=("--exhaustive", "--scope", "tiny"),
    )
    # then it fails, naming the promise, with the shortest trace: a worker leases the job,
    # the lease lapses and is swept, the other worker leases it, the first one starts it
    assert row["killed"], row
    assert row["promise"] == "I7", row
    found = re.search(r"replay\('tiny', (\[.*?\]), store='memory://'\)", row["stderr"])
    assert found, row["stderr"]
    trace = ast.literal_eval(found.group(1))
    assert trace == ["claim 0", "advance", "sweep 0", "claim 1", "start 0 0"]
    # and the printed program replays the failure on the mutant only (it is runnable)
    program = row["stderr"][row["stderr"].index("# Reproduce") :]
    clean = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert clean.returncode == 0, clean.stderr  # the unchanged tree: nothing breaks


@pytest.mark.slow  # 5,300 states, 24,381 transitions (docs/fault-suites.md): over a minute
def test_the_ci_scope_is_explored_within_its_budget() -> None:
    # the scope CI runs: complete, nothing broken, and its size as docs/fault-suites.md says
    found = explore(CI_SCOPE)
    assert found.ok, found.failure
    assert found.states >= 1000
