"""The kernel: what every plan and maintenance service works with, as one frozen value.

A `Kernel` holds the store, the clock, the policy, the compiled lifecycle, the kinds'
policies, the observers and the publisher. Plans (`fsm.service.plans`), the drivers
that carry their requests out (`fsm.service.drivers`), dependency releases, recovery,
reconcile rounds and schedules all take a kernel, never the `Engine`: the Engine and
the AsyncEngine are thin drivers over one. Changing a setting (a publisher attached
after construction, a kind registered) makes a new kernel; a call in flight keeps the
one it started with.

The kernel is also the one write path of decisions: `apply`, `claim`, `insert`,
`erase` and `record` write through the store and tell the observers of every
transition they wrote (`fsm.ports.Observer.on_transition`), so no code can write a
transition that nobody sees. `test_one_write_path` holds the rest of `fsm/` to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from .. import jsonio, payloads
from ..errors import UnknownKind, VersionConflict
from ..inputs import KindPolicy, check_name, new_job
from ..lifecycle.core import decide
from ..lifecycle.spec import Lifecycle
from ..policies import Policy
from ..ports import (
    Capacity,
    ClaimRequest,
    Clock,
    Delivery,
    Erasable,
    JoinsTransactions,
    Store,
    TracksDependencies,
)
from ..records import AuditEntry, Decision, Job, new_id
from ..telemetry.observers import Observers


def _frozen_kinds(kinds: Mapping[str, KindPolicy] | None) -> Mapping[str, KindPolicy]:
    return MappingProxyType(dict(kinds or {}))


@attrs.frozen
class Kernel:
    """Store, clock, policy, lifecycle, kinds, observers and publisher of one engine."""

    store: Store
    clock: Clock
    policy: Policy
    spec: Lifecycle
    observers: Observers
    kinds: Mapping[str, KindPolicy] = attrs.field(factory=dict, converter=_frozen_kinds)
    #: refuse to submit a kind without a registered policy (`UnknownKind`)
    strict_kinds: bool = False
    #: told of jobs that can be leased once they are committed (RabbitMQ wake-ups)
    publisher: Delivery | None = None
    #: the sources of the spec's `lease` event (where a job waits to be leased)
    lease_states: tuple[str, ...] = attrs.field(init=False)
    #: the sources of `heartbeat` (where a lease is held)
    heartbeat_states: tuple[str, ...] = attrs.field(init=False)
    #: where `wait` returns: terminal states and parked ones (an operator decides)
    final_states: frozenset[str] = attrs.field(init=False)
    #: the store keeps prerequisites (`after=`): writes release waiting dependents
    releases: bool = attrs.field(init=False)

    @lease_states.default
    def _lease_states(self) -> tuple[str, ...]:
        return self.spec.sources("lease")

    @heartbeat_states.default
    def _heartbeat_states(self) -> tuple[str, ...]:
        return self.spec.sources("heartbeat")

    @final_states.default
    def _final_states(self) -> frozenset[str]:
        return self.spec.terminal | self.spec.parked

    @releases.default
    def _releases(self) -> bool:
        return isinstance(self.store, TracksDependencies)

    @property
    def kernel(self) -> Kernel:
        """Itself (a kernel is a `KernelSource` too)."""
        return self

    def replace(self, **changes: Any) -> Kernel:
        """A new kernel with `changes` (derived fields are computed again)."""
        return attrs.evolve(self, **changes)

    def with_kind(self, kind: str, policy: KindPolicy | None = None) -> Kernel:
        """A new kernel that also knows `kind`'s policy (the default one if None)."""
        kinds = {**self.kinds, check_name("kind", kind): policy or KindPolicy()}
        return self.replace(kinds=kinds)

    # --- pure helpers -------------------------------------------------------------

    def decide(self, job: Job | None, event: str, now: float, **args: Any) -> Decision:
        """`fsm.lifecycle.core.decide` under this kernel's policy and lifecycle."""
        return decide(job, event, now, self.policy, spec=self.spec, **args)

    def submit_decision(self, now: float, kind: str, payload: Any, **opts: Any) -> Decision:
        """The `submit` decision for one new job: its options checked against the kind's
        policy (`fsm.inputs.new_job`), its payload encoded and bounded, a new id.
        Writes nothing: `fsm.service.plans.submit_many` inserts what this decides."""
        policy = self.kinds.get(kind) if isinstance(kind, str) else None
        if policy is None and self.strict_kinds:
            raise UnknownKind(check_name("kind", kind), list(self.kinds))
        check_name("kind", kind)
        if policy is not None and policy.payload_type is not None:  # docs/typed-payloads.md
            payload = payloads.to_data(policy.payload_type, payload, f"payload of {kind!r}")
        payload_json = jsonio.encode(
            payload, what=f"payload of {kind!r}", limit=self.policy.limits.max_payload_bytes
        )
        job = new_job(
            new_id(now),
            kind,
            payload_json,
            opts,
            policy,
            now=now,
            default_attempts=self.policy.retry.max_attempts,
            default_recoveries=self.policy.recovery.max_recoveries,
        )
        return self.decide(None, "submit", now, **attrs.asdict(job, recurse=False))

    def result_json(self, job_id: str, result: Any) -> str:
        """A handler's or an operator's result as stored JSON (bounded like payloads)."""
        return jsonio.encode(
            result, what=f"result of job {job_id}", limit=self.policy.limits.max_payload_bytes
        )

    def capacity(self) -> Capacity | None:
        """The queue capacities an insert must respect (None: every queue unbounded)."""
        caps = self.policy.limits.queue_capacity
        return Capacity(caps, self.lease_states) if caps else None

    # --- the one write path: every transition written is observed ------------------

    def observed(
        self, decisions: Sequence[Decision], written: Sequence[Job | VersionConflict | None]
    ) -> None:
        """Tell the observers of each decision that was written (a driver that wrote
        through another store, such as the asyncio twin, calls this itself)."""
        on_transition = self.observers.on_transition
        for decision, job in zip(decisions, written, strict=True):
            if isinstance(job, Job) and decision.entry is not None:
                on_transition(job, decision.entry)

    def inserted(self, decisions: Sequence[Decision], jobs: Sequence[Job]) -> list[Job]:
        """Observe the jobs an insert stored anew (not those returned for a repeated
        idempotency key); returns them."""
        fresh = []
        for decision, job in zip(decisions, jobs, strict=True):
            if job.id == decision.job.id and decision.entry is not None:
                self.observers.on_transition(job, decision.entry)
                fresh.append(job)
        return fresh

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        """`Store.apply`, observed."""
        written = self.store.apply(decisions)
        self.observed(decisions, written)
        return written

    def erase(self, decision: Decision) -> Job | VersionConflict:
        """`Erasable.erase`, observed (the caller checked the store can erase)."""
        store = self.store
        assert isinstance(store, Erasable)
        written = store.erase(decision)
        self.observed([decision], [written])
        return written

    def insert(self, decisions: Sequence[Decision], conn: Any = None) -> list[Job]:
        """`Store.insert` (or `JoinsTransactions.insert_in` with the caller's `conn`),
        observing the jobs stored anew."""
        if conn is None:
            jobs = self.store.insert(list(decisions), self.capacity())
        else:
            store = self.store
            assert isinstance(store, JoinsTransactions)
            jobs = store.insert_in(conn, list(decisions), self.capacity())
        self.inserted(decisions, jobs)
        return jobs

    def record(self, job: Job, entry: AuditEntry) -> None:
        """Append a rejected report's audit entry (it changes no job), observed."""
        self.store.record([entry])
        self.observers.on_transition(job, entry)

    def claim(
        self, request: ClaimRequest, entries: Mapping[str, Sequence[AuditEntry]]
    ) -> list[Job]:
        """`Store.claim`, observing the lease (and, claimed and started, the start) of
        each job it returns; `entries` maps job id -> the entries its decisions made,
        filled by the request's decide callbacks while the store runs them."""
        jobs = self.store.claim(request)
        on_transition = self.observers.on_transition
        for job in jobs:
            for entry in entries.get(job.id, ()):
                on_transition(job, entry)
        return jobs


class KernelSource(Protocol):
    """Whatever holds a current kernel: an `Engine` (its kernel changes when a setting
    does), or a `Kernel` itself. Long-lived services read `source.kernel` on each run,
    so they always work with the engine's current settings."""

    @property
    def kernel(self) -> Kernel: ...
