"""The fault models beside the main state machine, and the sizes they run at.

The main machine (`faults_machine`) drives simulated workers one step at a time.
The models registered here reach what one sequential machine cannot:

- `policy`: the retry, backoff, recovery and retry-safety promises, checked
  against the real `decide` for generated records and events (no store);
- `races`: a decision read before a heartbeat renewal or an operator write must
  lose its compare-and-set, one decision or a batch; the sweep fails every job
  past its deadline, leased and running ones included;
- `verdicts`: a death verdict is overtaken between the sweep's read and its
  write (another sweeper and a new live owner): it must not reach the new run;
- `crash`: a store's connection dies before its Nth statement (between the job
  write and the audit write, before COMMIT, ...): the job and its audit trail
  are written both or neither;
- `concurrency`: threads, each with its own store handle, race claims, starts,
  reports, heartbeats, cancels and sweeps on the same jobs; after every round
  no fence was leased twice, every accepted report came from the fence's
  holder, contention alone failed no call, and every trail replays to its record.
- `executor`: the thread executor is restarted and hard-cancelled while its
  handlers block, and their results arrive late: each attempt is settled once,
  and no late result of an abandoned attempt reaches the worker.
- `reports`: a real worker's handlers end in every documented way (results at
  and over the payload limit, retries, failures, cancels) while its report
  writes fail or its jobs are taken over: each outcome reaches the store as
  its documented event, refused or unreachable reports change nothing, and
  the worker holds no run once every outcome is handled; a progress write
  that fails is written again, so the latest progress is stored with the job.
- `pauses`: engines claim while queues are paused and resumed: an engine
  sees its own pause or resume at once, every engine within the documented
  bound, and a paused queue's jobs stay as they were.

Each model runs a number of hypothesis examples chosen by the size (`quick` for
CI smoke, `default`, `thorough` for nightly runs) and counts what it checked and
injected in the shared `FaultStats`, and which (state, event) pairs of the spec
it exercised in a `Coverage`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import ClassVar, Protocol

import attrs
from hypothesis import HealthCheck, Phase
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings

from ..ports import Store
from ..records import AuditEntry
from .faults_machine import FaultStats

#: size name -> (main machine examples, steps per example)
SIZES: dict[str, tuple[int, int]] = {
    "quick": (15, 25),
    "default": (250, 40),
    "thorough": (1000, 80),
}


def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"unknown fault suite size {size!r}; known: {sorted(SIZES)}")
    return size


#: opens one fresh, empty database for one example: `with database() as opener:`;
#: every call of the opener is a handle on that same database (for URLs, a new
#: connection pool or SQLite connection set, as separate worker processes would
#: hold). Every handle is closed once when the block ends.
Database = Callable[[], AbstractContextManager[Callable[[], Store]]]


@contextmanager
def handles(
    open_one: Callable[[], Store], *, shared: bool = False
) -> Iterator[Callable[[], Store]]:
    """An opener of handles made by `open_one` (or, `shared`, of the one store it
    makes, for stores that can only be reached through one object); closed at exit."""
    made: list[Store] = []

    def opener() -> Store:
        if shared and made:
            return made[0]
        store = open_one()
        made.append(store)
        return store

    try:
        yield opener
    finally:
        for store in made:
            store.close()


@attrs.define
class Coverage:
    """(state, event) pairs of the spec exercised, by whom: `store` counts the
    transitions a store wrote (read back from audit trails; heartbeats from
    renewals), `decide` the pairs the policy model decided."""

    store: Counter[tuple[str, str]] = attrs.field(factory=Counter)
    decide: Counter[tuple[str, str]] = attrs.field(factory=Counter)

    def trail(self, history: Iterable[AuditEntry]) -> None:
        for e in history:
            if e.outcome == "applied" and e.from_state is not None:
                self.store[(e.from_state, e.event)] += 1


@attrs.frozen
class ModelRun:
    """What a model is given: a fresh database per example, the size, the counters."""

    database: Database
    size: str
    stats: FaultStats
    coverage: Coverage
    seed: int | None = None
    notes: list[str] = attrs.field(factory=list)

    def settings(self, examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """Decorate a `@given` test: `examples` examples, find only (no shrinking: a
        failure's message already names the job and the broken promise), and the
        run's seed if one was given (else derandomized: reproducible)."""
        chosen = Settings(
            max_examples=examples,
            database=None,
            deadline=None,
            derandomize=self.seed is None,
            phases=(Phase.explicit, Phase.generate),
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )

        def apply(test: Callable[..., None]) -> Callable[..., None]:
            test = chosen(test)
            if self.seed is not None:
                test = hypothesis_seed(self.seed)(test)
            return test

        return apply


class FaultModel(Protocol):
    """One fault model: its name, what it injects, and its examples per size."""

    name: ClassVar[str]
    about: ClassVar[str]
    examples: ClassVar[dict[str, int]]

    def run(self, ctx: ModelRun) -> None:
        """Run the model's examples; raise AssertionError naming the broken promise."""
        ...
