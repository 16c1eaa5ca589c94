"""A hypothesis machine that drives two stores with the same operations and compares them.

One Engine runs on a reference store (tests pass `adapters.memory.MemoryStore`;
`fsm/` never imports adapters, so the reference is a parameter too) and one on
the store under test. Both share one `FakeClock` and identical, jitter-free
policies. Every rule (submit with or without an idempotency key, claim, start,
heartbeat, succeed, fail, ambiguous, release, cancel, cancelled_ack, a stale
report, clock jumps followed by a recovery sweep, requeue, resolve, prune, and a
submit that waits for stored jobs when both stores keep dependencies) is
applied to both, and after every step the machine asserts that both agree:
the same outcome or the same exception, the same states, fences, attempts and
every other field of every job (ids aside), the same audit trails and the same
counts.

    from adapters.memory import MemoryStore
    from fsm.testing.stateful import run_comparison

    def test_my_store_agrees_with_memory(tmp_path):
        run_comparison(MemoryStore, lambda: MyStore(tmp_path / uuid4().hex))

Settings come from the active profile (`fsm.testing.profiles`, JOBFSM_PROFILE)
unless `settings=` is given. Both factories are called once per example and
the stores are closed at its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ..clock import FakeClock
from ..errors import JobFSMError
from ..inputs import KindPolicy
from ..policies import Backoff, LeasePolicy, Limits, Policy, RetryPolicy
from ..ports import Store, TracksDependencies
from ..records import AuditEntry, Job, Owner
from ..service.engine import Engine
from ..service.maintenance import sweep
from .profiles import run_machine

StoreFactory = Callable[[], Store]

OWNERS = (Owner("host-a", 101, "inc-a"), Owner("host-b", 202, "inc-b"))
KEYS = ("key-1", "key-2", "key-3")
REPORTS = (
    "start",
    "succeed",
    "fail",
    "fail_permanent",
    "ambiguous",
    "release",
    "cancelled_ack",
)
#: what an owner reports in each state it can hold a lease in
OWNER_REPORTS = {
    "leased": ("start", "start", "start", "release"),
    "running": ("succeed", "succeed", "fail", "fail_permanent", "ambiguous"),
    "cancelling": ("cancelled_ack", "succeed"),
}
#: job fields that differ between two stores by construction (fresh random ids)
_OWN_FIELDS = ("id", "correlation_id")


def comparison_policy() -> Policy:
    """Deterministic (no jitter), small budgets, short retention so prune has work."""
    return Policy(
        retry=RetryPolicy(max_attempts=3, backoff=Backoff(base=2.0, jitter=False)),
        lease=LeasePolicy(ttl=30.0, heartbeat_interval=5.0),
        limits=Limits(retention={"succeeded": 60.0, "cancelled": 60.0, "failed": 600.0}),
    )


def _comparable(job: Job | None) -> tuple[Any, ...] | None:
    if job is None:
        return None
    return tuple(getattr(job, f.name) for f in attrs.fields(Job) if f.name not in _OWN_FIELDS)


def _unordered(text: str) -> str:
    """An error's words in sorted order: the two stores' ids sort differently."""
    return " ".join(sorted(text.replace(",", " ").split()))


def _ref(job: Job | None) -> Job | None:
    """The reference's job as `StoreComparison._as_ref` shows the candidate's."""
    if job is None or not job.last_error or job.on_failed_dependency is None:
        return job
    return attrs.evolve(job, last_error=_unordered(job.last_error))


def _entries(history: list[AuditEntry]) -> list[tuple[Any, ...]]:
    return [
        (e.event, e.from_state, e.to_state, e.version, e.fence, e.attempt, e.at, e.outcome)
        for e in history
    ]


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """('ok', value) or ('error', the exception's class name): what the caller saw."""
    try:
        return ("ok", call())
    except JobFSMError as err:
        return ("error", type(err).__name__)


class StoreComparison(RuleBasedStateMachine):
    """Subclassed by `comparison_machine` with the two store factories filled in."""

    reference_factory: StoreFactory
    candidate_factory: StoreFactory

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        kinds = {"k": KindPolicy(), "unsafe": KindPolicy(retry_safe=False)}
        self.stores = (type(self).reference_factory(), type(self).candidate_factory())
        self.ref, self.sut = (
            Engine(s, clock=self.clock, policy=comparison_policy(), kinds=kinds)
            for s in self.stores
        )
        #: (reference id, candidate id) of every job submitted
        self.pairs: list[tuple[str, str]] = []
        self.to_sut: dict[str, str] = {}
        self.to_ref: dict[str, str] = {}
        self.next_priority = 0

    def teardown(self) -> None:
        for store in self.stores:
            store.close()

    # --- helpers ---------------------------------------------------------------------

    def _pair(self, index: int) -> tuple[str, str]:
        return self.pairs[index % len(self.pairs)]

    def _both(
        self, call: Callable[[Engine, str], Any], index: int
    ) -> tuple[tuple[str, Any], tuple[str, Any]]:
        ref_id, sut_id = self._pair(index)
        a = _outcome(lambda: call(self.ref, ref_id))
        b = _outcome(lambda: call(self.sut, sut_id))
        return a, b

    def _agree(self, a: tuple[str, Any], b: tuple[str, Any], what: str) -> None:
        if a[0] == "ok" and b[0] == "ok":
            left = _comparable(_ref(a[1])) if isinstance(a[1], Job) else a[1]
            right = _comparable(self._as_ref(b[1])) if isinstance(b[1], Job) else b[1]
            assert left == right, f"{what}: reference {a[1]!r} != candidate {b[1]!r}"
        else:
            assert a == b, f"{what}: reference {a!r}, candidate {b!r}"

    # --- rules -----------------------------------------------------------------------

    def _submit(
        self, key: str | None, kind: str, queue: str, delay: float, deadline: float | None
    ) -> None:
        self.next_priority += 1
        opts: dict[str, Any] = {
            "queue": queue,
            "delay": delay,
            "priority": self.next_priority,  # unique, so lease order never ties on ids
            "idempotency_key": key,
            "deadline": None if deadline is None else self.clock.now() + deadline,
        }
        a = self.ref.submit(kind, {"p": self.next_priority}, **opts)
        b = self.sut.submit(kind, {"p": self.next_priority}, **opts)
        assert _comparable(a) == _comparable(b)
        if a.id in self.to_sut:
            assert self.to_sut[a.id] == b.id, "one key returned different jobs"
        else:
            assert b.id not in {s for _, s in self.pairs}, "a new job reused a stored one"
            self.pairs.append((a.id, b.id))
            self.to_sut[a.id] = b.id
            self.to_ref[b.id] = a.id

    @initialize(
        jobs=st.lists(
            st.tuples(
                st.sampled_from(("k", "unsafe")),
                st.sampled_from(("default", "default", "other")),
                st.sampled_from((0.0, 0.0, 0.0, 5.0)),
            ),
            min_size=1,
            max_size=6,
        )
    )
    def backlog(self, jobs: list[tuple[str, str, float]]) -> None:
        for kind, queue, delay in jobs:
            self._submit(None, kind, queue, delay, None)

    @rule(
        key=st.none() | st.sampled_from(KEYS),
        kind=st.sampled_from(("k", "unsafe")),
        queue=st.sampled_from(("default", "other")),
        delay=st.sampled_from((0.0, 0.0, 5.0, 50.0)),
        deadline=st.none() | st.sampled_from((20.0, 200.0)),
    )
    def submit(
        self, key: str | None, kind: str, queue: str, delay: float, deadline: float | None
    ) -> None:
        self._submit(key, kind, queue, delay, deadline)

    @precondition(
        lambda self: self.pairs and all(isinstance(s, TracksDependencies) for s in self.stores)
    )
    @rule(
        picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
        on_failed=st.sampled_from(("cancel", "run", "investigate")),
        queue=st.sampled_from(("default", "other")),
    )
    def submit_dependent(self, picks: list[int], on_failed: str, queue: str) -> None:
        """A job that waits for up to three stored jobs (docs/dependencies.md)."""
        self.next_priority += 1
        chosen = sorted({self._pair(i) for i in picks})
        opts: dict[str, Any] = {
            "queue": queue,
            "priority": self.next_priority,
            "on_failed_dependency": on_failed,
        }
        payload = {"p": self.next_priority}
        a = _outcome(lambda: self.ref.submit("k", payload, after=[r for r, _ in chosen], **opts))
        b = _outcome(lambda: self.sut.submit("k", payload, after=[c for _, c in chosen], **opts))
        if a[0] == b[0] == "ok":
            self.pairs.append((a[1].id, b[1].id))
            self.to_sut[a[1].id] = b[1].id
            self.to_ref[b[1].id] = a[1].id
        self._agree(a, b, "submit with after")

    def _as_ref(self, job: Job | None) -> Job | None:
        """A candidate's job with the candidate's job ids in `last_error` (a released
        job names its failed prerequisites, in id order) written as the reference's."""
        if job is None or not job.last_error or job.on_failed_dependency is None:
            return job
        text = job.last_error
        for sut_id, ref_id in self.to_ref.items():
            text = text.replace(sut_id, ref_id)
        return attrs.evolve(job, last_error=_unordered(text))

    @rule(
        who=st.sampled_from(OWNERS),
        queue=st.sampled_from(("default", "other")),
        limit=st.integers(1, 3),
        index=st.none() | st.integers(0, 10_000),
    )
    def claim(self, who: Owner, queue: str, limit: int, index: int | None) -> None:
        """Lease due jobs of a queue, or (index given) exactly one job by id."""
        if index is not None and self.pairs:
            ref_id, sut_id = self._pair(index)
            a = self.ref.claim(who, ["default", "other"], ids=[ref_id])
            b = self.sut.claim(who, ["default", "other"], ids=[sut_id])
        else:
            a = self.ref.claim(who, [queue], limit=limit)
            b = self.sut.claim(who, [queue], limit=limit)
        assert [self.to_sut[j.id] for j in a] == [j.id for j in b]
        assert [_comparable(_ref(j)) for j in a] == [_comparable(self._as_ref(j)) for j in b]

    def _held(self, states: tuple[str, ...]) -> list[int]:
        """Indexes of the pairs whose job (per the reference) is in one of `states`."""
        return [
            n
            for n, (ref_id, _) in enumerate(self.pairs)
            if (j := self.ref.store.get(ref_id)) is not None and j.state in states
        ]

    def _report(self, index: int, report: str, stale: bool) -> None:
        def call(engine: Engine, job_id: str) -> Job:
            job = engine.get(job_id)
            fence = job.fence - 1 if stale else job.fence
            if report == "start":
                return engine.start(job_id, fence)
            if report == "succeed":
                return engine.succeed(job_id, fence, {"r": 1})
            if report == "fail":
                return engine.fail(job_id, fence, "boom")
            if report == "fail_permanent":
                return engine.fail(job_id, fence, "boom", permanent=True)
            if report == "ambiguous":
                return engine.ambiguous(job_id, fence, "unknown")
            if report == "release":
                return engine.release(job_id, fence)
            return engine.cancelled_ack(job_id, fence, {"partial": 1})

        self._agree(*self._both(call, index), what=f"{report} (stale={stale})")

    def _owner_report(self, states: tuple[str, ...], index: int, choice: int) -> None:
        """The owner reports what a worker would in the job's state (per the reference)."""
        held = self._held(states)
        pick = held[index % len(held)]
        job = self.ref.store.get(self.pairs[pick][0])
        assert job is not None
        options = OWNER_REPORTS[job.state]
        self._report(pick, options[choice % len(options)], stale=False)

    @precondition(lambda self: bool(self._held(("leased",))))
    @rule(index=st.integers(0, 10_000), choice=st.integers(0, 11))
    def owner_starts_or_releases(self, index: int, choice: int) -> None:
        self._owner_report(("leased",), index, choice)

    @precondition(lambda self: bool(self._held(("running", "cancelling"))))
    @rule(index=st.integers(0, 10_000), choice=st.integers(0, 11))
    def owner_finishes(self, index: int, choice: int) -> None:
        self._owner_report(("running", "cancelling"), index, choice)

    @precondition(lambda self: bool(self.pairs))
    @rule(index=st.integers(0, 10_000), report=st.sampled_from(REPORTS), stale=st.booleans())
    def any_report(self, index: int, report: str, stale: bool) -> None:
        """Any report on any job, often stale or illegal: both must refuse alike."""
        self._report(index, report, stale=stale)

    @precondition(lambda self: bool(self.pairs))
    @rule(who=st.sampled_from(OWNERS), seconds=st.sampled_from((1.0, 5.0)))
    def heartbeat(self, who: Owner, seconds: float) -> None:
        self.clock.advance(seconds)
        held_ref = {
            r: j.fence
            for r, _ in self.pairs
            if (j := self.ref.store.get(r)) is not None and j.owner == who
        }
        held_sut = {self.to_sut[r]: f for r, f in held_ref.items()}
        a = self.ref.heartbeat(who, held_ref)
        b = self.sut.heartbeat(who, held_sut)
        assert {self.to_sut[k]: v for k, v in a.items()} == b

    @precondition(lambda self: bool(self.pairs))
    @rule(
        index=st.integers(0, 10_000),
        action=st.sampled_from(("cancel", "cancel", "requeue", "resolve")),
        attempts=st.integers(1, 3),
        outcome=st.sampled_from(("succeeded", "failed")),
    )
    def operator(self, index: int, action: str, attempts: int, outcome: str) -> None:
        """An operator cancels, requeues (with a fresh budget) or resolves a job."""

        def call(engine: Engine, job_id: str) -> Job:
            if action == "cancel":
                return engine.cancel(job_id, actor="op", reason="test")
            if action == "requeue":
                return engine.requeue(job_id, actor="op", reason="test", attempts=attempts)
            return engine.resolve(job_id, outcome=outcome, actor="op", reason="test")

        self._agree(*self._both(call, index), what=action)

    @rule(seconds=st.sampled_from((1.0, 10.0, 31.0, 100.0, 1000.0)))
    def time_passes_and_recovery_runs(self, seconds: float) -> None:
        self.clock.advance(seconds)
        assert sweep(self.ref) == sweep(self.sut)

    @rule()
    def prune(self) -> None:
        assert self.ref.prune() == self.sut.prune()

    # --- after every step --------------------------------------------------------------

    @invariant()
    def both_stores_hold_the_same_jobs_and_trails(self) -> None:
        assert self.ref.counts() == self.sut.counts()
        for ref_id, sut_id in self.pairs:
            a, b = _ref(self.ref.store.get(ref_id)), self._as_ref(self.sut.store.get(sut_id))
            assert _comparable(a) == _comparable(b), f"job {ref_id} / {sut_id} differs"
            assert _entries(self.ref.store.history(ref_id)) == _entries(
                self.sut.store.history(sut_id)
            )


def comparison_machine(reference: StoreFactory, candidate: StoreFactory) -> type[StoreComparison]:
    """A StoreComparison subclass bound to the two store factories."""
    return type(
        "StoreComparisonMachine",
        (StoreComparison,),
        {
            "reference_factory": staticmethod(reference),
            "candidate_factory": staticmethod(candidate),
        },
    )


def run_comparison(
    reference: StoreFactory,
    candidate: StoreFactory,
    *,
    settings: Settings | None = None,
    scale: float = 1.0,
) -> None:
    """Run the comparison with the active profile's settings (or `settings`).

    `scale` multiplies the profile's number of examples (at least 10), so a slow
    store can run a fixed share of whatever profile CI or a user picked.
    """
    chosen = settings or Settings()
    if scale != 1.0:
        chosen = Settings(chosen, max_examples=max(10, int(chosen.max_examples * scale)))
    machine = comparison_machine(reference, candidate)
    run_machine(machine, settings=chosen)
