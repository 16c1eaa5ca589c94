"""The store conformance suite: does a Store carry out the core's decisions exactly?

Every built-in store runs it, and so can yours. Subclass one of the suites in a
pytest test module and say how to make a fresh, empty store::

    from fsm.testing.conformance import (
        PersistentStoreConformance,
        SharedStoreConformance,
        StoreConformance,
    )

    class TestMyStore(SharedStoreConformance, PersistentStoreConformance):
        @pytest.fixture(autouse=True)
        def _url(self, tmp_path):
            self.url = f"mystore:///{tmp_path}/jobs"

        def make_store(self):       # a fresh, empty store per test
            return MyStore(self.url)

        def store_url(self):        # what a child process passes to fsm.open_store
            return self.url

        def reopen_store(self):     # a second handle on the same data
            return MyStore(self.url)

A store registered in the `jobfsm.stores` entry-point group needs only its URL:
put `UrlStore` first and set `self.url`; it supplies the three methods above
through `fsm.open_store`.

`StoreConformance` is for every store. It checks that every row of the
lifecycle table, applied through the Engine on the store, gives exactly the
record and audit entry the pure core (`fsm.lifecycle.core.decide`) computes;
compare-and-set (two decisions on one version: exactly one wins); idempotency
keys under concurrent submits; lease order (priority, run_after, id; not-due
and past-deadline jobs are never leased); concurrent leasing from threads, where
no fence is ever given to two owners and every job is leased exactly once;
renew semantics; expired-lease and deadline scans; prune bounds; audit order and
replay; stale reports recorded as rejected entries.

It also checks queue capacities (an insert past a capacity raises QueueFull and
writes nothing), that NaN or infinite times and integers beyond 64 bits are
refused with BadInput, that a job whose lease decision raises is skipped while
the jobs behind it are leased, and that a repeated stale report is recorded once.
Schedules (`fsm.testing.conformance_schedules`): kept, compare-and-set on the last
tick, one job per tick with several schedulers; refused by name by a store without them.

`SharedStoreConformance` adds concurrent leasing from several processes that
open `store_url()` through `fsm.open_store` (so the store must be registered in
the `jobfsm.stores` entry-point group), and 16 processes submitting at once to a
queue of capacity 5 (exactly 5 accepted). `DroppableStoreConformance` checks
`drop_schema()` (define `store_after_drop()`; `UrlStore` reopens the URL).
`PersistentStoreConformance` adds that a committed transition survives closing
and reopening the store. A store that is neither (like `memory://`) subclasses
only `StoreConformance`: a capability a store does not have is left out, never
skipped.

Sizes are class attributes (`concurrent_jobs`, `concurrent_threads`,
`concurrent_processes`, `claim_batch`) so the same checks can run bigger. The
store made by `make_store` is closed after each test. The suite imports neither
pytest nor any adapter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from ..clock import FakeClock
from ..errors import BadInput, IllegalTransition, LeaseLost, QueueFull, VersionConflict
from ..inputs import KindPolicy
from ..lifecycle.core import decide, replay, same_except_heartbeats
from ..lifecycle.spec import lifecycle
from ..policies import Backoff, LeasePolicy, Limits, Policy, RetryPolicy
from ..ports import (
    Capacity,
    ClaimRequest,
    CountsPrunes,
    Erasable,
    LeasesServices,
    PausesQueues,
    PruneRequest,
    ScanRequest,
    SchemaDroppable,
    Store,
)
from ..records import Decision, Job, Owner
from ..registry import open_store
from ..service.engine import Engine
from ..service.maintenance import sweep
from .conformance_claims import ClaimStartConformance
from .conformance_schedules import ScheduleConformance

TTL = 30.0
#: the states a job waits in (the sources of `lease`): what a queue capacity counts
WAITING_STATES = lifecycle().sources("lease")
MAX_ATTEMPTS = 3
#: bound on how long a child claimer process may run before the test fails.
CHILD_TIMEOUT = 120.0


def conformance_policy() -> Policy:
    """Deterministic policy for comparisons: no jitter, small budgets, short retention."""
    return Policy(
        retry=RetryPolicy(max_attempts=MAX_ATTEMPTS, backoff=Backoff(base=1.0, jitter=False)),
        lease=LeasePolicy(ttl=TTL, heartbeat_interval=5.0),
        limits=Limits(retention={"succeeded": 100.0, "cancelled": 100.0, "failed": None}),
    )


def owner(name: str = "a") -> Owner:
    return Owner(host=f"host-{name}", pid=1000 + ord(name[0]), incarnation=f"inc-{name}")


# --- reaching every state through the engine -----------------------------------

#: how to put a fresh job into each state: the events taken after submit.
PATHS: dict[str, tuple[str, ...]] = {
    "queued": (),
    "leased": ("lease",),
    "running": ("lease", "start"),
    "retry_wait": ("lease", "start", "fail"),
    "cancelling": ("lease", "start", "cancel"),
    "succeeded": ("lease", "start", "succeed"),
    "failed": ("lease", "start", "fail_permanent"),
    "cancelled": ("cancel",),
    "investigate": ("lease", "start", "ambiguous"),
    "waiting": (),
    # a lost run claimed for its kind's reconciler (submit with retry_safe=False)
    "reconciling": ("lease", "start", "mark", "claim_reconcile"),
    # ... that answered still_running: unclaimed, its next check due in 60 s
    "reconciling:waiting": ("lease", "start", "mark", "claim_reconcile", "still_running"),
}

#: `after=` of a recipe's submit: a fresh prerequisite that stays queued (the job waits)
PENDING_PREREQUISITE = "<pending prerequisite>"
#: `after=` of a recipe's submit: a prerequisite cancelled before the submit (a job with
#: on_failed_dependency="run" is let go at once) and requeued once the job is in place,
#: so the job has prerequisites and one of them is pending again
REOPENED_PREREQUISITE = "<reopened prerequisite>"


def reach(engine: Engine, clock: FakeClock, state: str, **submit: Any) -> Job:
    """Submit a job and drive it into `state` with ordinary engine calls."""
    if state == "waiting":
        submit.setdefault("after", PENDING_PREREQUISITE)
    after = submit.get("after")
    reopen: Job | None = None
    if after == PENDING_PREREQUISITE:
        submit["after"] = [engine.submit("conformance", {"n": 0}).id]
    elif after == REOPENED_PREREQUISITE:
        reopen = reach(engine, clock, "cancelled")
        submit["after"] = [reopen.id]
    if "claim_reconcile" in PATHS[state]:  # only a run that is not retry-safe is reconciled
        submit.setdefault("retry_safe", False)
    job = engine.submit("conformance", {"n": 1}, **submit)
    who = owner()
    for step in PATHS[state]:
        if step == "lease":
            (job,) = engine.claim(who, queues=[job.queue], ids=[job.id])
        elif step == "start":
            job = engine.start(job.id, job.fence)
        elif step == "fail":
            job = engine.fail(job.id, job.fence, "boom", delay=5.0)
        elif step == "fail_permanent":
            job = engine.fail(job.id, job.fence, "boom", permanent=True)
        elif step == "cancel":
            job = engine.cancel(job.id, actor="tester", reason="conformance")
        elif step == "succeed":
            job = engine.succeed(job.id, job.fence, {"ok": True})
        elif step == "ambiguous":
            job = engine.ambiguous(job.id, job.fence, "unknown effect")
        elif step == "mark":
            job = engine.mark(job.id, job.fence, "calling the outside", "ext-1")
        elif step == "claim_reconcile":
            claimed = engine.expire_seen(
                job, verdict="dead", reason="pid gone", reconciler=True, owner=owner("c")
            )
            assert claimed is not None, "the reconcile claim was not written"
            job = claimed
        elif step == "still_running":
            job = engine.reconcile(job.id, job.fence, "still_running", until=clock.now() + 60)
    if reopen is not None:
        engine.requeue(reopen.id, actor="tester", reason="reopen", attempts=1)
    reached = state.split(":", maxsplit=1)[0]
    assert job.state == reached, f"reaching {state!r} ended in {job.state!r}"
    return job


@attrs.frozen
class Recipe:
    """How to take one row (source, event, dest) of the table: setup, wait, arguments."""

    submit: dict[str, Any] = attrs.field(factory=dict)
    advance: float = 0.0
    args: Callable[[Job], dict[str, Any]] = lambda job: {}
    #: the PATHS key that reaches the source state, when it is not the state's name
    via: str | None = None


def _fenced(**extra: Any) -> Callable[[Job], dict[str, Any]]:
    return lambda job: {"fence": job.fence, **extra}


_OPERATOR: dict[str, Any] = {"actor": "tester", "reason": "conformance"}
_LATE = TTL + 1.0

#: one recipe per row of specs/job.toml; a row without a recipe fails the suite.
RECIPES: dict[tuple[str, str, str], Recipe] = {
    ("queued", "lease", "leased"): Recipe(),
    ("retry_wait", "lease", "leased"): Recipe(advance=10.0),
    ("leased", "start", "running"): Recipe(args=_fenced()),
    ("leased", "heartbeat", "leased"): Recipe(advance=5.0, args=_fenced()),
    ("running", "heartbeat", "running"): Recipe(advance=5.0, args=_fenced()),
    ("cancelling", "heartbeat", "cancelling"): Recipe(advance=5.0, args=_fenced()),
    ("running", "succeed", "succeeded"): Recipe(args=_fenced(result_json='{"r":1}')),
    ("cancelling", "succeed", "cancelled"): Recipe(args=_fenced(result_json="2")),
    ("running", "fail", "retry_wait"): Recipe(args=_fenced(error="boom", delay=None)),
    ("running", "fail", "failed"): Recipe(args=_fenced(error="boom", permanent=True)),
    ("running", "ambiguous", "investigate"): Recipe(args=_fenced(error="unknown")),
    ("leased", "release", "queued"): Recipe(args=_fenced()),
    ("leased", "expire", "queued"): Recipe(advance=_LATE),
    ("running", "expire", "retry_wait"): Recipe(advance=_LATE),
    ("running", "expire", "failed"): Recipe(advance=_LATE),
    ("running", "expire", "investigate"): Recipe(
        submit={"retry_safe": False}, args=lambda job: {"verdict": "dead", "reason": "pid gone"}
    ),
    ("cancelling", "expire", "cancelled"): Recipe(advance=_LATE),
    ("queued", "cancel", "cancelled"): Recipe(args=lambda job: dict(_OPERATOR)),
    ("retry_wait", "cancel", "cancelled"): Recipe(args=lambda job: dict(_OPERATOR)),
    ("leased", "cancel", "cancelled"): Recipe(args=lambda job: dict(_OPERATOR)),
    ("running", "cancel", "cancelling"): Recipe(args=lambda job: dict(_OPERATOR)),
    ("cancelling", "cancelled_ack", "cancelled"): Recipe(args=_fenced(result_json="null")),
    **{
        (state, "deadline", "failed"): Recipe(submit={"delay": 0.0}, advance=1000.0)
        for state in ("queued", "leased", "running", "retry_wait", "cancelling")
    },
    **{
        (state, "erase", state): Recipe(args=lambda job: dict(_OPERATOR))
        for state in ("succeeded", "failed", "cancelled")
    },
    ("failed", "requeue", "queued"): Recipe(args=lambda job: {**_OPERATOR, "attempts": 2}),
    ("cancelled", "requeue", "queued"): Recipe(args=lambda job: {**_OPERATOR, "attempts": 1}),
    ("investigate", "requeue", "queued"): Recipe(
        args=lambda job: {**_OPERATOR, "attempts": 1, "recoveries": 2}
    ),
    ("investigate", "resolve", "succeeded"): Recipe(
        args=lambda job: {**_OPERATOR, "outcome": "succeeded", "result_json": '"done"'}
    ),
    ("investigate", "resolve", "failed"): Recipe(
        args=lambda job: {**_OPERATOR, "outcome": "failed"}
    ),
    # dependencies (docs/dependencies.md): the prerequisites' states are the event's input
    ("waiting", "cancel", "cancelled"): Recipe(
        submit={"after": PENDING_PREREQUISITE}, args=lambda job: dict(_OPERATOR)
    ),
    ("waiting", "deadline", "failed"): Recipe(
        submit={"after": PENDING_PREREQUISITE}, advance=1000.0
    ),
    ("waiting", "dependencies_met", "queued"): Recipe(
        submit={"after": PENDING_PREREQUISITE},
        args=lambda job: {"prerequisites": {"P1": "succeeded"}},
    ),
    **{
        ("waiting", "dependency_failed", dest): Recipe(
            submit={"after": PENDING_PREREQUISITE, "on_failed_dependency": rule},
            args=lambda job: {"prerequisites": {"P1": "failed", "P2": "succeeded"}},
        )
        for dest, rule in (
            ("cancelled", "cancel"),
            ("queued", "run"),
            ("investigate", "investigate"),
        )
    },
    **{
        (state, "requeue", "waiting"): Recipe(
            submit={"after": REOPENED_PREREQUISITE, "on_failed_dependency": "run"},
            args=lambda job: {**_OPERATOR, "attempts": 1},
        )
        for state in ("failed", "cancelled", "investigate")
    },
    ("running", "mark", "running"): Recipe(args=_fenced(label="calling", external_id="ch_1")),
    ("cancelling", "mark", "cancelling"): Recipe(args=_fenced(label="still calling")),
    ("running", "expire", "reconciling"): Recipe(
        submit={"retry_safe": False},
        args=lambda job: {
            "verdict": "dead",
            "reason": "pid gone",
            "cause": "owner_dead_pid_gone",
            "reconciler": True,
            "owner": owner("c"),
        },
    ),
    ("reconciling", "expire", "investigate"): Recipe(submit={"retry_safe": False}, advance=_LATE),
    ("reconciling", "reconcile", "succeeded"): Recipe(
        submit={"retry_safe": False}, args=_fenced(answer="done", result_json='"paid"')
    ),
    ("reconciling", "reconcile", "retry_wait"): Recipe(
        submit={"retry_safe": False}, args=_fenced(answer="not_started")
    ),
    ("reconciling", "reconcile", "reconciling"): Recipe(
        submit={"retry_safe": False}, args=_fenced(answer="still_running", until=None)
    ),
    ("reconciling", "reconcile", "investigate"): Recipe(
        submit={"retry_safe": False}, args=_fenced(answer="unknown", failure="raised")
    ),
    ("reconciling", "recheck", "reconciling"): Recipe(
        submit={"retry_safe": False},
        via="reconciling:waiting",
        advance=61.0,
        args=lambda job: {"owner": owner("d")},
    ),
}


def table_rows() -> list[tuple[str, str, str]]:
    """Every (source, event, dest) of the loaded lifecycle, in spec order."""
    return [
        (src, event, rule.dest if rule.dest != "=" else src)
        for (src, event), rules in lifecycle().table.items()
        for rule in rules
    ]


E = TypeVar("E", bound=BaseException)


def raised(kind: type[E], call: Callable[[], object], what: str) -> E:
    """The `kind` exception `call` raises; AssertionError(`what`) if it raises none."""
    try:
        call()
    except kind as err:
        return err
    raise AssertionError(what)


# --- child claimer (python -m fsm.testing.conformance claim URL NAME BATCH) ----------


def _child_claim(url: str, name: str, batch: int) -> None:
    """Claim until the queue is empty; print one JSON line [[id, fence, owner], ...]."""
    store = open_store(url)
    try:
        engine = Engine(store, policy=conformance_policy())
        me = Owner(host="conformance", pid=os.getpid(), incarnation=name)
        got: list[list[Any]] = []
        empty = 0
        while empty < 3:  # bounded: three empty claims in a row end the loop
            jobs = engine.claim(me, limit=batch)
            empty = 0 if jobs else empty + 1
            got.extend([j.id, j.fence, str(j.owner)] for j in jobs)
        print(json.dumps(got))
    finally:
        store.close()


def _child_submit(url: str, capacity: int, go: str) -> None:
    """Print "ready", wait for the file `go`, submit one job to a queue of `capacity`;
    print "accepted" or "full"."""
    store = open_store(url)
    try:
        policy = attrs.evolve(
            conformance_policy(), limits=Limits(queue_capacity={"default": capacity})
        )
        engine = Engine(store, policy=policy)
        print("ready", flush=True)
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not os.path.exists(go):  # bounded by CHILD_TIMEOUT
            if time.monotonic() > deadline:
                sys.exit("the go file never appeared")
            time.sleep(0.0005)
        try:
            engine.submit("conformance", {"pid": os.getpid()})
        except QueueFull:
            print("full", flush=True)
        else:
            print("accepted", flush=True)
    finally:
        store.close()


# --- the suite ----------------------------------------------------------------------


class StoreConformance(ScheduleConformance, ClaimStartConformance):
    """Base class of a store's conformance tests; see the module docstring."""

    concurrent_jobs: int = 5000
    concurrent_threads: int = 8
    claim_batch: int = 25

    # --- what a subclass provides --------------------------------------------------

    def make_store(self) -> Store:
        """A fresh, empty store for one test."""
        raise NotImplementedError("subclass StoreConformance and define make_store()")

    # --- plumbing ------------------------------------------------------------------

    _store: Store | None = None
    _opened: list[Store]

    @property
    def store(self) -> Store:
        if self._store is None:
            self._opened = []
            self._store = self.make_store()
            self._opened.append(self._store)
        return self._store

    def teardown_method(self, method: object = None) -> None:
        for s in getattr(self, "_opened", []):
            s.close()
        self._opened = []
        self._store = None

    def engine(self, store: Store | None = None) -> tuple[Engine, FakeClock]:
        clock = FakeClock()
        engine = Engine(
            store or self.store,
            clock=clock,
            policy=conformance_policy(),
            kinds={"conformance": KindPolicy(), "unsafe": KindPolicy(retry_safe=False)},
        )
        return engine, clock

    # --- every row of the lifecycle agrees with the core ---------------------------

    def test_every_row_of_the_lifecycle_table_has_a_recipe(self) -> None:
        missing = [row for row in table_rows() if row not in RECIPES]
        assert not missing, f"rows of the lifecycle with no conformance recipe: {missing}"

    def test_every_transition_applied_through_the_engine_equals_the_core_decision(self) -> None:
        engine, clock = self.engine()
        checked = 0
        for source, event, dest in table_rows():
            recipe = RECIPES[(source, event, dest)]
            submit = dict(recipe.submit)
            if event == "deadline":
                submit["deadline"] = clock.now() + 500.0
            elif (event, dest) == ("expire", "failed"):  # its deadline passes while it runs
                submit["deadline"] = clock.now() + _LATE / 2
            job = reach(engine, clock, recipe.via or source, **submit)
            clock.advance(recipe.advance)
            before = self.store.get(job.id)
            assert before == job, f"{source}->{event}: the stored job is not what was written"
            now = clock.now()
            args = recipe.args(before)
            if event == "lease":
                who = owner("b")
                args = {"owner": who, "lease_until": now + TTL}
            elif event == "heartbeat":
                args["lease_until"] = now + TTL
            expected = decide(before, event, now, engine.policy, **args)
            if event == "lease":
                leased = engine.claim(who, ids=[job.id])
                assert leased == [expected.job], f"{source}->{event}: claim differs from decide"
            elif event == "heartbeat":
                renewed = engine.heartbeat(before.owner or owner(), {job.id: before.fence})
                assert renewed == {job.id: source}
            else:
                got = engine.transition(job.id, event, **args)
                assert got == expected.job, f"{source}-{event}->{dest}: engine returned {got}"
            after = self.store.get(job.id)
            assert after == expected.job, (
                f"{source} -{event}-> {dest}: store has {after}, core decided {expected.job}"
            )
            assert after.state == dest
            history = self.store.history(job.id)
            if expected.entry is not None:
                assert history[-1] == expected.entry, f"{source}-{event}->{dest}: audit entry"
            checked += 1
        assert checked == len(table_rows()) > 0

    # --- insert, get, idempotency --------------------------------------------------

    def test_insert_is_atomic_and_get_returns_what_was_written(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many([("conformance", {"i": i}, {}) for i in range(5)])
        assert [self.store.get(j.id) for j in jobs] == jobs
        assert self.store.get("no-such-job") is None
        assert [e.event for e in self.store.history(jobs[0].id)] == ["submit"]

    def test_a_second_submit_with_the_same_key_returns_the_stored_job(self) -> None:
        engine, _ = self.engine()
        first = engine.submit("conformance", {"v": 1}, idempotency_key="key-1")
        second = engine.submit("conformance", {"v": 2}, idempotency_key="key-1")
        assert second == first
        assert sum(self.store.counts().values()) == 1
        assert len(self.store.history(first.id)) == 1

    def test_concurrent_submits_of_one_key_from_threads_make_one_job(self) -> None:
        engine, _ = self.engine()
        results: list[Job] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(self.concurrent_threads)

        def submit(i: int) -> None:
            try:
                barrier.wait(timeout=30)
                results.append(engine.submit("conformance", {"i": i}, idempotency_key="once"))
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [
            threading.Thread(target=submit, args=(i,)) for i in range(self.concurrent_threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert len(results) == self.concurrent_threads
        assert len({j.id for j in results}) == 1
        assert sum(self.store.counts().values()) == 1

    # --- compare-and-set -----------------------------------------------------------

    def test_two_decisions_on_one_version_exactly_one_wins(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "queued")
        cancel = decide(job, "cancel", clock.now(), engine.policy, **_OPERATOR)
        lease = decide(job, "lease", clock.now(), engine.policy, owner=owner(), lease_until=1e12)
        first, second = self.store.apply([cancel]), self.store.apply([lease])
        assert first == [cancel.job]
        assert isinstance(second[0], VersionConflict)
        assert self.store.get(job.id) == cancel.job
        assert [e.event for e in self.store.history(job.id)] == ["submit", "cancel"]

    def test_two_decisions_on_one_version_in_one_call_only_the_first_is_written(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "queued")
        a = decide(job, "cancel", clock.now(), engine.policy, **_OPERATOR)
        b = decide(job, "cancel", clock.now(), engine.policy, actor="other", reason="again")
        out = self.store.apply([a, b])
        assert out[0] == a.job
        assert isinstance(out[1], VersionConflict)
        assert self.store.history(job.id)[-1].actor == "tester"

    def test_a_batch_writes_every_decision_but_the_stale_one_which_it_names(self) -> None:
        engine, clock = self.engine()
        jobs = [reach(engine, clock, "queued") for _ in range(5)]
        now = clock.now()
        mine = owner()
        batch = [
            decide(j, "cancel", now, engine.policy, **_OPERATOR)
            if i % 2
            else decide(j, "lease", now, engine.policy, owner=mine, lease_until=1e12)
            for i, j in enumerate(jobs)
        ]
        moved = decide(jobs[3], "lease", now, engine.policy, owner=mine, lease_until=1e12)
        assert self.store.apply([moved]) == [moved.job]  # batch[3] is stale now
        out = self.store.apply(batch)
        assert [o for i, o in enumerate(out) if i != 3] == [
            d.job for i, d in enumerate(batch) if i != 3
        ]
        conflict = out[3]
        assert isinstance(conflict, VersionConflict)
        assert conflict.actual == moved.job.version
        for i, d in enumerate(batch):
            kept = moved if i == 3 else d
            assert self.store.get(d.job.id) == kept.job
            assert [e.event for e in self.store.history(d.job.id)] == ["submit", kept.event]

    def test_a_batch_of_good_decisions_is_written_whole_in_its_order(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "queued")
        others = [reach(engine, clock, "queued") for _ in range(3)]
        now = clock.now()
        lease = decide(job, "lease", now, engine.policy, owner=owner(), lease_until=1e12)
        # the second decision builds on the first: in one call, in this order, both hold
        start = decide(lease.job, "start", now, engine.policy, fence=lease.job.fence)
        batch = [lease, *[decide(o, "cancel", now, engine.policy, **_OPERATOR) for o in others]]
        batch.append(start)
        assert self.store.apply(batch) == [d.job for d in batch]
        assert self.store.get(job.id) == start.job
        assert [e.event for e in self.store.history(job.id)] == ["submit", "lease", "start"]
        for o in others:
            assert [e.event for e in self.store.history(o.id)] == ["submit", "cancel"]

    def test_concurrent_decisions_from_threads_on_one_version_have_one_winner(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "queued")
        decisions = [
            decide(job, "cancel", clock.now(), engine.policy, actor=f"t{i}", reason="race")
            for i in range(self.concurrent_threads)
        ]
        outcomes: list[Job | VersionConflict] = []
        barrier = threading.Barrier(len(decisions))

        def apply(d: Decision) -> None:
            barrier.wait(timeout=30)
            outcomes.extend(self.store.apply([d]))

        threads = [threading.Thread(target=apply, args=(d,)) for d in decisions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        winners = [o for o in outcomes if isinstance(o, Job)]
        assert len(outcomes) == len(decisions)
        assert len(winners) == 1
        assert self.store.get(job.id) == winners[0]
        assert len(self.store.history(job.id)) == 2

    def test_apply_on_a_deleted_job_is_a_version_conflict(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "cancelled")
        decision = decide(job, "requeue", clock.now(), engine.policy, attempts=1, **_OPERATOR)
        clock.advance(1000.0)
        assert engine.prune() == 1
        (out,) = self.store.apply([decision])
        assert isinstance(out, VersionConflict)
        assert out.actual is None
        assert self.store.get(job.id) is None

    # --- leasing ---------------------------------------------------------------------

    def test_lease_order_is_priority_then_run_after_then_id(self) -> None:
        engine, clock = self.engine()
        now = clock.now()
        late_high = engine.submit("conformance", 1, priority=-5, run_after=now - 1)
        early_low = engine.submit("conformance", 2, priority=0, run_after=now - 10)
        late_low = engine.submit("conformance", 3, priority=0, run_after=now - 5)
        tie_a = engine.submit("conformance", 4, priority=7, run_after=now - 1)
        tie_b = engine.submit("conformance", 5, priority=7, run_after=now - 1)
        ties = sorted([tie_a.id, tie_b.id])
        order = [j.id for _ in range(5) for j in engine.claim(owner(), limit=1)]
        assert order == [late_high.id, early_low.id, late_low.id, *ties]

    def test_not_due_and_past_deadline_jobs_are_never_leased(self) -> None:
        engine, clock = self.engine()
        now = clock.now()
        due = engine.submit("conformance", 1)
        engine.submit("conformance", 2, run_after=now + 60)
        engine.submit("conformance", 3, deadline=now)
        engine.submit("conformance", 4, queue="elsewhere")
        leased = engine.claim(owner(), queues=["default"], limit=10)
        assert [j.id for j in leased] == [due.id]
        assert engine.claim(owner(), queues=["default"], limit=10) == []

    def test_a_batch_lease_writes_every_job_and_its_audit_entry(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many([("conformance", i, {"priority": i}) for i in range(7)])
        leased = engine.claim(owner(), limit=5)
        assert [j.id for j in leased] == [j.id for j in jobs[:5]]
        for job in leased:
            assert (job.state, job.fence, job.owner) == ("leased", 1, owner())
            assert self.store.get(job.id) == job
            assert [e.event for e in self.store.history(job.id)] == ["submit", "lease"]

    def test_claim_by_ids_leases_exactly_those_that_are_claimable(self) -> None:
        engine, clock = self.engine()
        a, b = engine.submit("conformance", 1), engine.submit("conformance", 2)
        done = reach(engine, clock, "succeeded")
        leased = engine.claim(owner(), ids=[b.id, done.id, "missing", b.id], limit=10)
        assert [j.id for j in leased] == [b.id]  # a duplicate id (a redelivery) leases once
        assert self.store.get(a.id) is not None
        assert self.store.get(a.id).state == "queued"  # type: ignore[union-attr]

    def test_claim_by_kinds_leases_only_those_kinds_and_leaves_the_rest_untouched(
        self,
    ) -> None:
        engine, _ = self.engine()
        mine = engine.submit("conformance", 1)
        other = engine.submit("unsafe", 2)
        by_id = engine.claim(owner(), ids=[mine.id, other.id], limit=10, kinds=["conformance"])
        assert [j.id for j in by_id] == [mine.id]
        assert engine.claim(owner(), limit=10, kinds=[]) == []
        assert engine.claim(owner(), limit=10, kinds=["conformance"]) == []
        untouched = self.store.get(other.id)
        assert untouched is not None
        assert (untouched.state, untouched.fence, untouched.version) == ("queued", 0, 1)
        assert [j.id for j in engine.claim(owner(), limit=10, kinds=["unsafe"])] == [other.id]

    def test_erase_blanks_payload_and_result_in_the_record_and_the_whole_trail(self) -> None:
        engine, _clock = self.engine()
        secret = "card-4242-4242"
        job = engine.submit("conformance", {"card": secret})
        (leased,) = engine.claim(owner(), limit=1)
        engine.start(job.id, leased.fence)
        engine.succeed(job.id, leased.fence, {"charged": secret})
        if not isinstance(self.store, Erasable):
            refused = raised(
                BadInput,
                lambda: engine.erase(job.id, actor="ops", reason="GDPR request"),
                "a store without erase must refuse it",
            )
            assert "cannot erase" in str(refused)
            return
        erased = engine.erase(job.id, actor="ops", reason="GDPR request")
        trail = self.store.history(job.id)
        assert (erased.state, erased.payload, erased.result) == ("succeeded", None, None)
        assert self.store.get(job.id) == erased
        assert not [e for e in trail if secret in e.data_json], "a copy was left in the trail"
        assert (trail[-1].event, trail[-1].actor, trail[-1].reason) == (
            "erase",
            "ops",
            "GDPR request",
        )
        rebuilt = replay(trail)
        assert rebuilt is not None
        assert same_except_heartbeats(rebuilt, erased)

    def test_erase_refuses_an_unfinished_job_and_changes_nothing(self) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running")
        if not isinstance(self.store, Erasable):
            return
        raised(
            IllegalTransition,
            lambda: engine.erase(running.id, actor="ops", reason="too early"),
            "erase of a running job must be illegal",
        )
        assert self.store.get(running.id) == running

    def test_a_paused_queue_is_not_leased_until_it_is_resumed(self) -> None:
        engine, clock = self.engine()
        if not isinstance(self.store, PausesQueues):
            refused = raised(
                BadInput,
                lambda: engine.pause("default", actor="ops", reason="incident"),
                "a store that cannot pause must say so",
            )
            assert "cannot pause" in str(refused)
            return
        job = engine.submit("conformance", 1)
        other = engine.submit("conformance", 2, queue="other")
        pause = engine.pause("default", actor="ops", reason="incident 42")
        assert self.store.paused_queues() == {"default": pause}
        clock.advance(1.0)
        leased = engine.claim(owner(), queues=["default", "other"], limit=10)
        assert [j.id for j in leased] == [other.id]
        assert self.store.get(job.id).state == "queued"  # type: ignore[union-attr]
        assert engine.resume("default", actor="ops", reason="fixed") is True
        assert engine.resume("default", actor="ops", reason="again") is False
        assert self.store.paused_queues() == {}
        assert [j.id for j in engine.claim(owner(), limit=10)] == [job.id]

    def _assert_leased_once(self, grants: Sequence[tuple[str, int, str]], ids: set[str]) -> None:
        by_fence: dict[tuple[str, int], set[str]] = {}
        for job_id, fence, who in grants:
            by_fence.setdefault((job_id, fence), set()).add(who)
        doubled = {k: v for k, v in by_fence.items() if len(v) > 1}
        assert not doubled, f"one fence given to two owners: {doubled}"
        assert len(grants) == len(by_fence), "a job was leased twice under one fence"
        assert {g[0] for g in grants} == ids, "not every job was leased"
        assert len(grants) == len(ids), "a job was leased more than once"
        assert {g[1] for g in grants} == {1}

    def test_concurrent_leasing_from_threads_leases_every_job_once(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many([("conformance", i, {}) for i in range(self.concurrent_jobs)])
        grants: list[tuple[str, int, str]] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(self.concurrent_threads)

        def work(n: int) -> None:
            who = owner(f"t{n}")
            try:
                barrier.wait(timeout=30)
                while True:
                    got = engine.claim(who, limit=self.claim_batch)
                    if not got:
                        return
                    grants.extend((j.id, j.fence, str(j.owner)) for j in got)
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(self.concurrent_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=CHILD_TIMEOUT)
        assert not errors, errors[:3]
        self._assert_leased_once(grants, {j.id for j in jobs})
        assert self.store.counts() == {("default", "leased"): self.concurrent_jobs}

    # --- renew --------------------------------------------------------------------

    def test_renew_extends_only_leases_whose_owner_fence_and_state_match(self) -> None:
        engine, clock = self.engine()
        jobs = engine.submit_many([("conformance", i, {"priority": i}) for i in range(4)])
        held = engine.claim(owner(), limit=4)
        assert [j.id for j in held] == [j.id for j in jobs]
        released = engine.release(held[3].id, held[3].fence)
        clock.advance(5.0)
        renewed = engine.heartbeat(
            owner(),
            {held[0].id: held[0].fence, held[1].id: held[1].fence + 1, released.id: 1},
        )
        stranger = engine.heartbeat(owner("z"), {held[2].id: held[2].fence})
        assert renewed == {held[0].id: "leased"}
        assert stranger == {}
        after = self.store.get(held[0].id)
        assert after is not None
        assert after.lease_until == clock.now() + TTL
        assert after.version == held[0].version + 1
        assert after.updated_at == clock.now()
        for job in (held[1], held[2]):
            assert self.store.get(job.id) == job
        assert self.store.get(released.id) == released
        assert len(self.store.history(held[0].id)) == 2  # heartbeats are not audited

    def test_renew_of_a_cancelling_job_reports_the_cancel(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "cancelling")
        assert engine.heartbeat(owner(), {job.id: job.fence}) == {job.id: "cancelling"}

    # --- scans -----------------------------------------------------------------------

    def test_scan_finds_expired_leases_and_passed_deadlines_only(self) -> None:
        engine, clock = self.engine()
        start = clock.now()
        lapsed = reach(engine, clock, "running")
        clock.advance(20.0)
        fresh = reach(engine, clock, "leased", queue="other")
        queued = engine.submit("conformance", 1, deadline=start + 25.0)
        later = engine.submit("conformance", 2, deadline=start + 1e6)
        clock.advance(15.0)  # lapsed expired at start+30; fresh expires at start+50
        now = clock.now()
        leased_states = ("leased", "running", "cancelling")
        expired = self.store.scan(ScanRequest(states=leased_states, lease_expired_at=now))
        assert [j.id for j in expired] == [lapsed.id]
        active = ("queued", "leased", "running", "retry_wait", "cancelling")
        passed = self.store.scan(ScanRequest(states=active, deadline_passed_at=now))
        assert [j.id for j in passed] == [queued.id]
        assert later.id not in {j.id for j in passed}
        by_host = self.store.scan(ScanRequest(states=leased_states, owner_host=owner().host))
        assert {j.id for j in by_host} == {lapsed.id, fresh.id}
        assert self.store.scan(ScanRequest(states=leased_states, owner_host="nowhere")) == []
        other = self.store.scan(ScanRequest(states=leased_states, queues=("other",)))
        assert [j.id for j in other] == [fresh.id]
        kinds = self.store.scan(ScanRequest(states=("queued",), kinds=("conformance",)))
        assert {j.id for j in kinds} == {queued.id, later.id}
        assert len(self.store.scan(ScanRequest(states=active, limit=1))) == 1
        boundary = self.store.scan(ScanRequest(states=leased_states, lease_expired_at=start + TTL))
        assert [j.id for j in boundary] == [lapsed.id]  # a lease ending now has lapsed

    def test_recover_expires_lapsed_leases_and_fails_passed_deadlines(self) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running")
        leased = reach(engine, clock, "leased")
        late = reach(engine, clock, "queued", deadline=clock.now() + 10.0)
        on_time = reach(engine, clock, "queued", deadline=clock.now() + 1e6)
        clock.advance(_LATE)
        report = sweep(engine)
        assert (report.expired, report.deadlines) == (2, 1)
        states = [self.store.get(x.id) for x in (running, leased, late)]
        assert [j.state if j else None for j in states] == ["retry_wait", "queued", "failed"]
        assert self.store.get(on_time.id) == on_time

    # --- prune --------------------------------------------------------------------------

    def test_prune_deletes_only_old_jobs_in_the_given_states_with_their_audit(self) -> None:
        engine, clock = self.engine()
        old_done = reach(engine, clock, "succeeded", idempotency_key="old-done")
        old_cancelled = reach(engine, clock, "cancelled")
        old_failed = reach(engine, clock, "failed")
        parked = reach(engine, clock, "investigate")
        waiting = reach(engine, clock, "queued")
        running = reach(engine, clock, "running")
        clock.advance(1000.0)
        new_done = reach(engine, clock, "succeeded")
        cutoff = clock.now() - 500.0
        deleted = self.store.prune(PruneRequest(cutoffs={"succeeded": cutoff, "cancelled": cutoff}))
        assert deleted == 2
        for gone in (old_done, old_cancelled):
            assert self.store.get(gone.id) is None
            assert self.store.history(gone.id) == []
        for kept in (old_failed, parked, waiting, running, new_done):
            assert self.store.get(kept.id) == kept
        again = engine.submit("conformance", 1, idempotency_key="old-done")
        assert again.id != old_done.id  # a pruned key is free again

    def test_engine_prune_never_touches_non_terminal_or_investigate_jobs(self) -> None:
        spec = lifecycle()
        unfinished = [s for s in spec.states if s not in spec.terminal]
        engine, clock = self.engine()
        engine.policy = attrs.evolve(
            engine.policy, limits=Limits(retention=dict.fromkeys(unfinished, 1.0))
        )
        kept = [reach(engine, clock, s) for s in unfinished]
        clock.advance(10_000.0)
        assert engine.prune() == 0
        for job in kept:
            assert self.store.get(job.id) == job

    def test_prune_by_queue_keeps_each_queue_by_its_own_retention(self) -> None:
        engine, clock = self.engine()
        audit = reach(engine, clock, "succeeded", queue="audit")
        mail = reach(engine, clock, "succeeded", queue="mail")
        other = reach(engine, clock, "succeeded")
        clock.advance(1000.0)
        cutoff = clock.now() - 500.0
        # the queues' own rules: "audit" is left alone, only "mail" is looked at
        only_mail = PruneRequest(cutoffs={"succeeded": cutoff}, queues=("mail",))
        rest = PruneRequest(cutoffs={"succeeded": cutoff}, other_than=("audit", "mail"))
        assert self.store.prune(only_mail) == 1
        assert self.store.prune(rest) == 1
        assert [self.store.get(j.id) for j in (mail, other)] == [None, None]
        assert self.store.get(audit.id) == audit
        assert self.store.prune(PruneRequest(cutoffs={"succeeded": cutoff}, queues=())) == 0

    def test_prune_counts_tells_what_it_deleted_by_queue_and_state(self) -> None:
        if not isinstance(self.store, CountsPrunes):
            return  # an optional capability (the retention metrics)
        engine, clock = self.engine()
        for queue, state in (("mail", "succeeded"), ("mail", "cancelled"), ("audit", "succeeded")):
            reach(engine, clock, state, queue=queue)
        reach(engine, clock, "succeeded", queue="mail")
        kept = reach(engine, clock, "failed", queue="mail")
        clock.advance(1000.0)
        cutoff = clock.now() - 500.0
        request = PruneRequest(cutoffs={"succeeded": cutoff, "cancelled": cutoff})
        assert self.store.prune_counts(request) == {
            ("mail", "succeeded"): 2,
            ("mail", "cancelled"): 1,
            ("audit", "succeeded"): 1,
        }
        assert self.store.prune_counts(request) == {}
        assert self.store.get(kept.id) == kept

    def test_engine_prune_applies_per_queue_retention(self) -> None:
        engine, clock = self.engine()
        keep_long = reach(engine, clock, "succeeded", queue="audit")
        short = reach(engine, clock, "succeeded")
        clock.advance(8 * 86400.0)  # past the default 7 days
        pruned = engine.prune(queue_retention={"audit": {"succeeded": 30 * 86400.0}})
        assert pruned == 1
        assert self.store.get(short.id) is None
        assert self.store.get(keep_long.id) == keep_long

    def test_prune_deletes_at_most_limit_jobs_per_call(self) -> None:
        engine, clock = self.engine()
        for _ in range(5):
            reach(engine, clock, "succeeded")
        clock.advance(1000.0)
        request = PruneRequest(cutoffs={"succeeded": clock.now()}, limit=2)
        assert [self.store.prune(request) for _ in range(4)] == [2, 2, 1, 0]
        assert self.store.counts() == {}

    # --- audit, replay, stale reports ---------------------------------------------------

    def test_history_is_in_write_order_and_replays_to_the_stored_job(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "retry_wait")
        clock.advance(10.0)
        (job,) = engine.claim(owner("b"), ids=[job.id])
        job = engine.start(job.id, job.fence)
        clock.advance(5.0)
        engine.heartbeat(owner("b"), {job.id: job.fence})
        clock.advance(_LATE)
        sweep(engine)
        clock.advance(1.0)
        (job,) = engine.claim(owner("c"), ids=[job.id])
        job = engine.start(job.id, job.fence)
        engine.succeed(job.id, job.fence, {"done": 1})
        history = self.store.history(job.id)
        assert [e.event for e in history] == [
            "submit", "lease", "start", "fail", "lease", "start", "expire",
            "lease", "start", "succeed",
        ]  # fmt: skip
        assert [e.version for e in history] == sorted(e.version for e in history)
        stored = self.store.get(job.id)
        rebuilt = replay(history, engine.policy)
        assert stored is not None
        assert rebuilt is not None
        assert same_except_heartbeats(rebuilt, stored)

    def test_a_success_after_a_retry_keeps_no_last_error_and_the_trail_keeps_it(self) -> None:
        # given a job whose first attempt asked for a retry
        engine, clock = self.engine()
        job = reach(engine, clock, "retry_wait")
        assert job.last_error == "boom"
        clock.advance(10.0)
        # when its second attempt succeeds
        (job,) = engine.claim(owner("b"), ids=[job.id])
        job = engine.start(job.id, job.fence)
        engine.succeed(job.id, job.fence, {"done": 1})
        # then the stored job shows no error; the failed attempt's entry still has it
        stored = self.store.get(job.id)
        assert stored is not None
        assert (stored.state, stored.attempt, stored.last_error) == ("succeeded", 2, None)
        failed = [e for e in self.store.history(job.id) if e.event == "fail"]
        assert [(e.attempt, e.error) for e in failed] == [(1, "boom")]

    def test_a_stale_report_changes_nothing_and_is_recorded_as_rejected(self) -> None:
        engine, clock = self.engine()
        first = reach(engine, clock, "leased")
        clock.advance(_LATE)
        sweep(engine)
        (second,) = engine.claim(owner("b"), ids=[first.id])
        try:
            engine.start(first.id, first.fence)
        except LeaseLost:
            pass
        else:
            raise AssertionError("a start with a stale fence was accepted")
        assert self.store.get(first.id) == second
        last = self.store.history(first.id)[-1]
        assert (last.event, last.outcome, last.fence) == ("start", "rejected", first.fence)
        rebuilt = replay(self.store.history(first.id), engine.policy)
        assert rebuilt is not None
        assert same_except_heartbeats(rebuilt, second)

    def test_record_for_an_unknown_job_is_ignored(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "queued")
        entry = attrs.evolve(self.store.history(job.id)[0], job_id="ghost", outcome="rejected")
        self.store.record([entry])
        assert self.store.history("ghost") == []
        assert len(self.store.history(job.id)) == 1

    def test_counts_group_jobs_by_queue_and_state(self) -> None:
        engine, clock = self.engine()
        reach(engine, clock, "queued")
        reach(engine, clock, "queued", queue="q2")
        reach(engine, clock, "running", queue="q2")
        assert self.store.counts() == {
            ("default", "queued"): 1,
            ("q2", "queued"): 1,
            ("q2", "running"): 1,
        }

    def test_bad_input_stores_nothing(self) -> None:
        engine, _ = self.engine()
        try:
            engine.submit_many([("conformance", 1, {}), ("conformance", object(), {})])
        except BadInput:
            pass
        else:
            raise AssertionError("a payload that is not JSON was accepted")
        assert self.store.counts() == {}

    # --- capacity, values a store cannot hold, refused leases, repeated rejections -----

    def _capacity(self, **limits: int) -> Capacity:
        return Capacity(limits, WAITING_STATES)

    def _submitted(self, engine: Engine, n: int, **opts: Any) -> list[Decision]:
        now = engine.clock.now()
        return [engine.kernel.submit_decision(now, "conformance", i, **opts) for i in range(n)]

    def test_insert_with_a_capacity_refuses_a_batch_that_would_overshoot_and_writes_none(
        self,
    ) -> None:
        engine, _ = self.engine()
        cap = self._capacity(default=3)
        assert len(self.store.insert(self._submitted(engine, 2), cap)) == 2
        full = raised(
            QueueFull,
            lambda: self.store.insert(self._submitted(engine, 2), cap),
            "an insert past the queue's capacity was accepted",
        )
        assert (full.queue, full.capacity) == ("default", 3)
        assert self.store.counts() == {("default", "queued"): 2}, "a refused batch wrote jobs"
        other = self.store.insert(self._submitted(engine, 4, queue="other"), cap)
        assert len(other) == 4, "a queue without a limit is unbounded"
        assert len(self.store.insert(self._submitted(engine, 1), cap)) == 1
        (leased,) = engine.claim(owner(), limit=1)
        assert len(self.store.insert(self._submitted(engine, 1), cap)) == 1, (
            "a leased job is not waiting: it must not count against the capacity"
        )
        assert self.store.get(leased.id) == leased
        try:
            self.store.insert(self._submitted(engine, 1, idempotency_key="cap-key"), cap)
        except QueueFull:
            pass
        else:
            raise AssertionError("a new job in a full queue was accepted")

    def test_submit_to_a_capped_queue_never_counts_the_whole_store(self) -> None:
        engine, _ = self.engine()
        engine.policy = attrs.evolve(engine.policy, limits=Limits(queue_capacity={"default": 2}))

        def counts() -> dict[tuple[str, str], int]:
            raise AssertionError("the capacity check counted every job of the store")

        store: Any = self.store
        store.counts = counts  # the store's own count, by queue and state, must not be used
        try:
            engine.submit_many([("conformance", i, {}) for i in range(2)])
            raised(QueueFull, lambda: engine.submit("conformance", 3), "a third job fit in 2")
        finally:
            del store.counts

    def test_a_duplicate_key_in_a_full_queue_returns_the_stored_job(self) -> None:
        engine, _ = self.engine()
        cap = self._capacity(default=1)
        (first,) = self.store.insert(self._submitted(engine, 1, idempotency_key="k"), cap)
        (again,) = self.store.insert(self._submitted(engine, 1, idempotency_key="k"), cap)
        assert again == first, "a repeat of a stored key adds no job, so it is never refused"

    def test_a_non_finite_time_or_a_64_bit_overflow_is_refused_and_stores_nothing(self) -> None:
        engine, clock = self.engine()
        (good,) = self._submitted(engine, 1)
        changes: list[tuple[str, dict[str, Any]]] = [
            ("deadline", {"deadline": float("nan")}),
            ("run_after", {"run_after": float("inf")}),
            ("priority", {"priority": 2**63}),
        ]
        for field, change in changes:
            bad = attrs.evolve(good, job=attrs.evolve(good.job, **change))

            def insert(bad: Decision = bad) -> object:
                return self.store.insert([bad])

            err = raised(BadInput, insert, f"a job with {change} was stored")
            assert field in str(err), f"the error does not name {field}: {err}"
        assert self.store.counts() == {}
        job = reach(engine, clock, "queued")
        cancel = decide(job, "cancel", clock.now(), engine.policy, **_OPERATOR)
        bad = attrs.evolve(cancel, job=attrs.evolve(cancel.job, finished_at=float("nan")))
        err = raised(
            BadInput, lambda: self.store.apply([bad]), "a record with a NaN time was written"
        )
        assert "finished_at" in str(err)
        assert self.store.get(job.id) == job
        assert len(self.store.history(job.id)) == 1

    def test_a_job_the_core_refuses_to_lease_is_skipped_and_the_jobs_behind_it_are_leased(
        self,
    ) -> None:
        engine, clock = self.engine()
        bad, *good = engine.submit_many([("conformance", i, {"priority": i}) for i in range(4)])
        now = clock.now()

        def lease(job: Job) -> Decision:
            if job.id == bad.id:
                raise IllegalTransition(job.id, job.state, "lease", "refused by the test")
            return decide(job, "lease", now, engine.policy, owner=owner(), lease_until=now + TTL)

        def claim(limit: int) -> list[Job]:
            return self.store.claim(
                ClaimRequest(
                    owner=owner(),
                    queues=("default",),
                    now=now,
                    limit=limit,
                    lease_until=now + TTL,
                    states=WAITING_STATES,
                    decide=lease,
                )
            )

        assert [j.id for j in claim(1)] == [good[0].id], "the refused job blocked the claim"
        assert [j.id for j in claim(5)] == [good[1].id, good[2].id]
        assert claim(5) == []
        assert self.store.get(bad.id) == bad, "the refused job was changed"
        assert [e.event for e in self.store.history(bad.id)] == ["submit"]

    def test_a_repeated_rejected_report_is_recorded_once(self) -> None:
        engine, clock = self.engine()
        first = reach(engine, clock, "leased")
        clock.advance(_LATE)
        sweep(engine)
        (second,) = engine.claim(owner("b"), ids=[first.id])
        for _ in range(3):
            for event in ("start", "release"):

                def report(event: str = event) -> object:
                    return engine.transition(first.id, event, fence=first.fence)

                raised(LeaseLost, report, "a report with a stale fence was accepted")
        rejected = [
            (e.event, e.fence) for e in self.store.history(first.id) if e.outcome == "rejected"
        ]
        assert rejected == [("start", first.fence), ("release", first.fence)]
        (entry,) = [e for e in self.store.history(first.id) if e.event == "start"][-1:]
        self.store.record([entry, entry])
        assert len(self.store.history(first.id)) == len(rejected) + 4  # submit lease expire lease
        assert self.store.get(first.id) == second


class UrlStore:
    """The store factories for a store opened by URL: a subclass sets `self.url`.

    List it before the suites (`class T(UrlStore, SharedStoreConformance, ...)`)
    so its methods take the place of theirs.
    """

    url: str

    def make_store(self) -> Store:
        return open_store(self.url)

    def store_url(self) -> str:
        return self.url

    def reopen_store(self) -> Store:
        return open_store(self.url)

    def store_after_drop(self) -> Store:
        return open_store(self.url)


class SharedStoreConformance(StoreConformance):
    """For stores that several processes open at once by URL (SQLite, PostgreSQL)."""

    concurrent_processes: int = 4

    def store_url(self) -> str:
        """The URL a child process passes to `fsm.open_store` to share this test's store."""
        raise NotImplementedError("define store_url() for the cross-process checks")

    def test_concurrent_leasing_from_processes_leases_every_job_once(self) -> None:
        url = self.store_url()
        engine = Engine(self.store, policy=conformance_policy())
        jobs = engine.submit_many([("conformance", i, {}) for i in range(self.concurrent_jobs)])
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fsm.testing.conformance",
                    "claim",
                    url,
                    f"p{n}",
                    str(self.claim_batch),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(self.concurrent_processes)
        ]
        grants: list[tuple[str, int, str]] = []
        try:
            for child in children:
                out, err = child.communicate(timeout=CHILD_TIMEOUT)
                assert child.returncode == 0, f"claimer failed: {err[-2000:]}"
                grants.extend((g[0], g[1], g[2]) for g in json.loads(out))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        self._assert_leased_once(grants, {j.id for j in jobs})
        assert len({g[2] for g in grants}) >= 1
        assert self.store.counts() == {("default", "leased"): self.concurrent_jobs}

    capacity_submitters: int = 16
    capacity_limit: int = 5

    def test_capacity_holds_when_many_processes_submit_at_once(self) -> None:
        """16 processes submit one job each, at once, to a queue of capacity 5."""
        url = self.store_url()
        self.store.counts()  # the schema exists before the children open it
        go = os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"jobfsm-go-{os.getpid()}-{time.monotonic_ns()}"
        )
        args = [sys.executable, "-m", "fsm.testing.conformance", "submit", url]
        children = [
            subprocess.Popen(
                [*args, str(self.capacity_limit), go],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(self.capacity_submitters)
        ]
        answers: list[str] = []
        try:
            for child in children:
                assert child.stdout is not None
                line = child.stdout.readline().strip()  # each child opened its store
                assert line == "ready", f"submitter failed: {child.stderr.read()[-2000:]}"  # type: ignore[union-attr]
            with open(go, "w"):
                pass
            for child in children:
                out, err = child.communicate(timeout=CHILD_TIMEOUT)
                assert child.returncode == 0, f"submitter failed: {err[-2000:]}"
                answers.append(out.strip())
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
            if os.path.exists(go):
                os.remove(go)
        counts = self.store.counts()
        waiting = sum(counts.get(("default", s), 0) for s in WAITING_STATES)
        assert sorted(answers) == sorted(
            ["accepted"] * self.capacity_limit
            + ["full"] * (self.capacity_submitters - self.capacity_limit)
        ), f"answers {answers}, {waiting} jobs waiting"
        assert waiting == self.capacity_limit


class DroppableStoreConformance(StoreConformance):
    """For stores with `drop_schema()`: it removes every job and audit entry it holds."""

    def store_after_drop(self) -> Store:
        """A store on the same data after `drop_schema()` (reopened, or the same object)."""
        raise NotImplementedError("define store_after_drop() for the drop_schema check")

    def test_drop_schema_removes_every_job_and_audit_entry(self) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running", unique="dropped-unique")
        done = reach(engine, clock, "succeeded", idempotency_key="dropped")
        now = clock.now()
        if leases := isinstance(self.store, LeasesServices):
            assert self.store.take_service_lease("retention", "before", now, now + 60)
        assert isinstance(self.store, SchemaDroppable)
        self.store.drop_schema()
        after = self.store_after_drop()
        if after is not self.store:
            self._opened.append(after)
        assert after.counts() == {}
        for job in (running, done):
            assert after.get(job.id) is None
            assert after.history(job.id) == []
        # nothing of before is left: keys, unique keys (the memory store's index of them
        # outlived the drop and a submit of a key used before raised KeyError), leases
        again, _ = self.engine(after)
        assert again.submit("conformance", 1, idempotency_key="dropped").id != done.id
        assert again.submit("conformance", 2, unique="dropped-unique").id != running.id
        if leases:
            assert isinstance(after, LeasesServices)
            assert after.take_service_lease("retention", "after", now, now + 60)


class PersistentStoreConformance(StoreConformance):
    """For stores whose committed data outlives the store object (files, servers)."""

    def reopen_store(self) -> Store:
        """A new handle on the data of this test's store."""
        raise NotImplementedError("define reopen_store() for the durability checks")

    def test_a_committed_transition_survives_reopening_the_store(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "succeeded")
        self.store.close()
        self._opened.remove(self.store)
        reopened = self.reopen_store()
        self._opened.append(reopened)
        assert reopened.get(job.id) == job
        assert [e.event for e in reopened.history(job.id)] == [
            "submit", "lease", "start", "succeed",
        ]  # fmt: skip


if __name__ == "__main__":  # the children of the cross-process tests
    if len(sys.argv) == 5 and sys.argv[1] == "claim":
        _child_claim(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "submit":
        _child_submit(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(
            "usage: python -m fsm.testing.conformance claim URL NAME BATCH\n"
            "       python -m fsm.testing.conformance submit URL CAPACITY GO_FILE"
        )
