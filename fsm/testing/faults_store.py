"""A fault-injecting Store proxy for the fault suite.

`FaultyStore(inner)` forwards every call to the real store, except when a fault
is armed:

- "before": the call raises `TransientStoreError` without reaching the store
  (connection lost before the statement ran: nothing committed);
- "after": the call reaches the store, commits, and then raises
  `TransientStoreError` (the acknowledgement was lost: the caller cannot tell
  whether it committed, so it must re-read);
- a race: the next `apply` first lets a concurrent writer change the job (an
  operator cancel, or a heartbeat renewal), so the decision it carries is stale
  and only the store's compare-and-set on `version` keeps it out.

Each armed fault fires once. The proxy never decides a state itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from ..errors import TransientStoreError, VersionConflict
from ..ports import (
    Capacity,
    ClaimRequest,
    CountsPrunes,
    Erasable,
    PruneRequest,
    RenewRequest,
    ScanRequest,
    Store,
    TracksDependencies,
)
from ..records import AuditEntry, Decision, Job
from ..service.maintenance.retention import UNKNOWN

#: store methods a fault can be armed on (reads fail only "before")
FAULTABLE = (
    "insert",
    "claim",
    "apply",
    "renew",
    "record",
    "prune",
    "get",
    "scan",
    "dependents",
)
WRITES = frozenset({"insert", "claim", "apply", "renew", "record", "prune"})


class FaultyStore:
    """Forward to `inner`; raise armed faults once, before or after the real call."""

    def __init__(self, inner: Store, racer: Callable[[str], str | None] | None = None) -> None:
        self.inner = inner
        #: called with a job id just before a raced apply; returns what it did
        self.racer = racer
        self.armed: dict[str, str] = {}
        self.race_armed = False
        self.fired: Counter[str] = Counter()

    def arm(self, method: str, when: str) -> None:
        if method not in FAULTABLE:
            raise ValueError(f"no fault can be armed on store method {method!r}")
        if when not in ("before", "after"):
            raise ValueError(f"a store fault fires 'before' or 'after' the call, not {when!r}")
        self.armed[method] = when if method in WRITES else "before"

    def arm_race(self) -> None:
        self.race_armed = True

    def disarm(self) -> None:
        self.armed.clear()
        self.race_armed = False

    def before(self, method: str) -> str | None:
        when = self.armed.pop(method, None)
        if when == "before":
            self.fired[f"store error before commit ({method})"] += 1
            raise TransientStoreError(f"injected fault: {method} failed before reaching the store")
        return when

    def after(self, method: str, when: str | None) -> None:
        if when == "after":
            self.fired[f"store error after commit ({method})"] += 1
            raise TransientStoreError(
                f"injected fault: {method} committed, then the reply was lost"
            )

    def race(self, decisions: Sequence[Decision]) -> None:
        """An armed race: let the concurrent writer change the job before this apply."""
        if self.race_armed and decisions and self.racer is not None:
            self.race_armed = False
            did = self.racer(decisions[0].job.id)
            if did is not None:
                self.fired[f"concurrent {did} before apply"] += 1

    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        when = self.before("insert")
        out = self.inner.insert(decisions, capacity)
        self.after("insert", when)
        return out

    def get(self, job_id: str) -> Job | None:
        self.before("get")
        return self.inner.get(job_id)

    def claim(self, request: ClaimRequest) -> list[Job]:
        when = self.before("claim")
        out = self.inner.claim(request)
        self.after("claim", when)
        return out

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        when = self.before("apply")
        self.race(decisions)
        out = self.inner.apply(decisions)
        self.after("apply", when)
        return out

    def renew(self, request: RenewRequest) -> dict[str, str]:
        when = self.before("renew")
        out = self.inner.renew(request)
        self.after("renew", when)
        return out

    def record(self, entries: Sequence[AuditEntry]) -> None:
        when = self.before("record")
        self.inner.record(entries)
        self.after("record", when)

    def scan(self, request: ScanRequest) -> list[Job]:
        self.before("scan")
        return self.inner.scan(request)

    def history(self, job_id: str) -> list[AuditEntry]:
        return self.inner.history(job_id)

    # dependencies: forwarded when the store keeps them (a store that does not has none)

    def prerequisites(self, job_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        inner = self.inner
        return inner.prerequisites(job_ids) if isinstance(inner, TracksDependencies) else {}

    def dependents(self, job_ids: Sequence[str], states: tuple[str, ...], limit: int) -> list[Job]:
        self.before("dependents")  # the release after a write fails: the sweep repairs it
        inner = self.inner
        if not isinstance(inner, TracksDependencies):
            return []
        return inner.dependents(job_ids, states, limit)

    def in_states_after(self, states: tuple[str, ...], after: str, limit: int) -> list[Job]:
        inner = self.inner
        if not isinstance(inner, TracksDependencies):
            return []
        return inner.in_states_after(states, after, limit)

    def counts(self) -> dict[tuple[str, str], int]:
        return self.inner.counts()

    def prune(self, request: PruneRequest) -> int:
        when = self.before("prune")
        out = self.inner.prune(request)
        self.after("prune", when)
        return out

    def prune_counts(self, request: PruneRequest) -> dict[tuple[str, str], int]:
        """`fsm.ports.CountsPrunes`, faulted as `prune` (one armed fault fires on either):
        the inner store's counts, or its `prune` under the retention service's "unknown"
        key for a store that does not tell."""
        when = self.before("prune")
        inner = self.inner
        if isinstance(inner, CountsPrunes):
            out = inner.prune_counts(request)
        else:
            out = {(UNKNOWN, UNKNOWN): inner.prune(request)}
        self.after("prune", when)
        return out

    def close(self) -> None:
        self.inner.close()


class ErasingFaultyStore(FaultyStore):
    """A FaultyStore over a store that can erase (`Erasable`): the erase goes through
    as it is (no fault is armed on it), so the engine sees the capability it has."""

    def erase(self, decision: Decision) -> Job | VersionConflict:
        assert isinstance(self.inner, Erasable)
        return self.inner.erase(decision)
