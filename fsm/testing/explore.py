"""The exhaustive mode: every interleaving of a small world, not a sample.

`explore(scope, store_url)` enumerates, breadth first, every sequence of actions a
world of `scope` allows (`explore_world`: workers claiming, starting, reporting,
marking, heartbeating; a crash, clock advances, recovery sweeps, a held
reconciler answer, an operator action), each one a production call over a fresh
store of `store_url`'s kind (memory://, or sqlite:/// for the smaller scopes). After
every transition the invariants are checked on the state it reached. States are
identified by their canonical key (modulo versions, absolute times and audit
trails, and the permutations of the workers): a state already seen is not
expanded again.

What a run proves is bounded: within the scope's workers, jobs and fault budgets,
no interleaving of the production `decide`, the engine's plans and the store
breaks an invariant checked here (docs/fault-suites.md, "The exhaustive mode").

A failure is reported with the shortest action sequence that reaches it (breadth
first: no shorter path in the explored graph breaks it), as a runnable program.

Worlds are rebuilt by replaying their path from a fresh store (the store cannot be
copied), so a run costs about states x actions x depth production calls; a
replay that does not reach the recorded state is reported (a world must be a
function of its actions).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs

from ..errors import BadInput, JobFSMError
from ..ports import Store
from .explore_world import Scope, World, replay_world

#: the scopes `jobfsm faults --exhaustive --scope NAME` knows
SCOPES: dict[str, Scope] = {
    s.name: s
    for s in (
        Scope(
            "tiny",
            "2 workers x 1 retry-safe job; 1 crash, 1 clock advance, 1 sweep, 1 operator action",
            kinds=("safe",),
            advances=1,
            sweeps=1,
            answers=0,
        ),
        Scope(
            "small",
            "2 workers x 2 jobs (one retry-safe, one not, with marks and a reconciler); "
            "1 crash, 1 clock advance of 31 s, 1 sweep, 1 held reconciler answer, "
            "1 operator action",
            advances=1,
            sweeps=1,
        ),
        Scope(
            "reconcile",
            "2 workers x 1 job that is not retry-safe, marks and has a reconciler; 1 crash, "
            "2 clock advances of 31 s, 2 sweeps, 1 held reconciler answer, 1 operator action",
            kinds=("charge",),
        ),
        Scope(
            "wide",
            "2 workers x 2 jobs (one retry-safe, one not, with marks and a reconciler); "
            "1 crash, 2 clock advances of 31 s, 2 sweeps, 1 held reconciler answer, "
            "1 operator action",
        ),
    )
}
#: most states one run may hold (memory is about 1 KB a state): a bound, not a goal
MAX_STATES = 2_000_000


@attrs.frozen
class Exploration:
    """What an exhaustive run explored, and what broke."""

    scope: str
    store_url: str
    states: int
    transitions: int
    depth: int
    seconds: float
    complete: bool
    failure: str | None = None
    #: the shortest action sequence that breaks `failure`
    trace: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None and self.complete

    def program(self) -> str:
        """The failing trace as a runnable program (it raises where the trace breaks)."""
        return (
            "# Reproduce: python this_file.py (the shortest failing action sequence)\n"
            "from fsm.testing.explore import replay\n\n"
            f"replay({self.scope!r}, {list(self.trace)!r}, store={self.store_url!r})\n"
        )


def scope_named(name: str) -> Scope:
    if name not in SCOPES:
        raise BadInput(f"unknown exhaustive scope {name!r}; known: {', '.join(SCOPES)}")
    return SCOPES[name]


@contextmanager
def _factory(url: str) -> Iterator[Callable[[], Store]]:
    from .faults import fresh_stores

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("memory", "sqlite"):
        raise BadInput(
            f"the exhaustive mode runs on memory:// or sqlite:/// (a store per replayed "
            f"world), not {url!r}"
        )
    with fresh_stores(url) as factory:
        yield factory


def explore(
    scope: Scope | str,
    store_url: str = "memory://",
    *,
    max_states: int = MAX_STATES,
    progress: Callable[[int, int], None] | None = None,
) -> Exploration:
    """Every interleaving of `scope`'s world, breadth first (see the module doc)."""
    chosen = scope_named(scope) if isinstance(scope, str) else scope
    started = time.monotonic()
    with _factory(store_url) as factory:
        world = World(chosen, factory)
        try:
            problem = world.check({})
            root = (world.key(), tuple(world.enabled()))
        finally:
            world.close()
        seen: set[tuple[object, ...]] = {root[0]}
        #: (path, its state's key, the actions enabled there), one BFS level after another
        frontier: deque[tuple[tuple[str, ...], tuple[object, ...], tuple[str, ...]]] = deque(
            [((), *root)]
        )
        transitions = depth = 0
        failure: tuple[str, tuple[str, ...]] | None = (problem, ()) if problem else None
        while frontier and failure is None and len(seen) < max_states:
            path, key, actions = frontier.popleft()
            depth = max(depth, len(path))
            for n, action in enumerate(actions):
                transitions += 1
                world, broke = _successor(chosen, factory, path, key if n == 0 else None, action)
                try:
                    if broke is not None:
                        failure = (broke, (*path, action))
                        break
                    nxt = world.key()
                    if nxt not in seen:
                        seen.add(nxt)
                        frontier.append(((*path, action), nxt, tuple(world.enabled())))
                finally:
                    world.close()
            if progress is not None:
                progress(len(seen), transitions)
    return Exploration(
        scope=chosen.name,
        store_url=store_url,
        states=len(seen),
        transitions=transitions,
        depth=depth,
        seconds=time.monotonic() - started,
        complete=not frontier or failure is not None,
        failure=None if failure is None else failure[0],
        trace=() if failure is None else failure[1],
    )


def _successor(
    scope: Scope,
    factory: Callable[[], Store],
    path: tuple[str, ...],
    key: tuple[object, ...] | None,
    action: str,
) -> tuple[World, str | None]:
    """The world after `path` + `action`. With `key`, the replayed `path` is first
    checked to reach that state again (a world must be a function of its actions)."""
    if key is None:
        return replay_world(scope, factory, (*path, action))
    world, broke = replay_world(scope, factory, path)
    if broke is None and world.key() != key:
        world.close()
        raise AssertionError(
            f"replaying {list(path)} did not reach the state first reached by it: the "
            "world is not a function of its actions (randomness or wall-clock time?)"
        )
    if broke is None:
        try:
            broke = world.do(action)
        except JobFSMError as err:
            broke = f"{action} raised {type(err).__name__}: {err}"
        if broke is not None:
            broke = f"after {action!r}: {broke}"
    return world, broke


def replay(scope: Scope | str, trace: list[str], store: str = "memory://") -> None:
    """Replay `trace` in a fresh world of `scope`; raise AssertionError where it breaks."""
    chosen = scope_named(scope) if isinstance(scope, str) else scope
    with _factory(store) as factory:
        try:
            world, broke = replay_world(chosen, factory, tuple(trace), check_all=True)
        except JobFSMError as err:  # pragma: no cover - replay_world reports these
            raise AssertionError(str(err)) from err
        world.close()
    if broke is not None:
        raise AssertionError(broke)
