"""Retention: finished jobs past their retention are deleted, in bounded batches.

`prune` is `Engine.prune` and `jobfsm prune`; `Retention` is the same work as the
worker's automatic retention (docs/retention.md): one worker at a time runs it, the
holder of the store's service lease "retention", taken by compare-and-set with an
expiry (`fsm.ports.LeasesServices`). A pass deletes at most `batch` jobs per batch and
`max_batches` batches, renewing the lease before each batch and stopping if it is
lost. Only terminal states are ever pruned, whatever a rule names; a job that a
waiting job still depends on is kept until its dependent no longer waits. What a
job's age is, and which jobs a batch may delete, the store's `prune` decides in one
statement, so a holder that lost its lease in the middle of a batch can only delete
what any holder would.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping

import attrs

from ...errors import BadInput
from ...inputs import check_int, check_name, seconds
from ...lifecycle.spec import lifecycle
from ...ports import CountsPrunes, LeasesServices, PruneRequest, ServiceLease
from ..dependencies import waiting_states
from ..kernel import Kernel, KernelSource
from .report import Report

log = logging.getLogger(__name__)

#: the name of the service lease in the store (`service_leases.name`)
LEASE_NAME = "retention"
#: seconds between two passes of a worker's retention (jittered by ±10 %)
DEFAULT_EVERY = 60.0
#: jobs deleted per batch (one store transaction), and the most a batch may take
DEFAULT_BATCH = 1000
MAX_BATCH = 10_000
#: batches per pass, and the most a pass may run
DEFAULT_MAX_BATCHES = 10
MAX_BATCHES = 1000
#: the shortest pass interval
MIN_EVERY = 1.0
#: the queue and state reported to observers for jobs deleted by a store that does not
#: say which (`fsm.ports.CountsPrunes`; every built-in store does)
UNKNOWN = "unknown"
#: the lease lasts this many pass intervals unless `lease_for` says otherwise
LEASE_INTERVALS = 3.0

#: "7d", "12h", "30m", "45s", "1.5d", or "forever" (kept until handled)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h|d)")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(what: str, text: str) -> float | None:
    """`7d`, `12h`, `30m`, `45s` -> seconds; `forever` -> None (BadInput naming `what`)."""
    if text == "forever":
        return None
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise BadInput(
            f"{what}: {text!r:.80} is not a duration: a number with a unit s, m, h or d "
            "(e.g. 7d, 12h), or 'forever'"
        )
    return seconds(what, float(match[1]) * _UNIT[match[2]], positive=True)


def parse_retain(text: str) -> tuple[str, float | None]:
    """`STATE=DURATION` (`jobfsm worker --retain succeeded=7d`) -> (state, seconds|None)."""
    state, eq, value = text.partition("=")
    if not eq:
        raise BadInput(f"--retain {text!r:.80}: expected STATE=DURATION, e.g. succeeded=7d")
    return check_state(state.strip()), duration(f"--retain {state.strip()}", value.strip())


def check_state(state: object) -> str:
    terminal = sorted(lifecycle().terminal)
    if state not in terminal:
        raise BadInput(
            f"retention names state {state!r:.80}: only finished states are pruned "
            f"({', '.join(terminal)})"
        )
    return str(state)


def _keep(value: Mapping[str, float | str | None]) -> dict[str, float | None]:
    if not isinstance(value, Mapping) or not value:
        raise BadInput(
            f"retention must map finished states to seconds kept, got {value!r:.80} "
            "(e.g. {'succeeded': 7 * 86400.0})"
        )
    out: dict[str, float | None] = {}
    for state, keep in value.items():
        name = check_state(state)
        if keep is None or isinstance(keep, str):
            out[name] = None if keep is None else duration(f"retention of {name}", keep)
        else:
            out[name] = seconds(f"retention of {name}", keep, positive=True)
    return out


def _every(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if seconds(f"retention {attribute.name}", value) < MIN_EVERY:
        raise BadInput(f"retention {attribute.name} must be at least {MIN_EVERY:g} s")


@attrs.frozen
class RetentionPlan:
    """What a worker's automatic retention does (docs/retention.md): per finished state,
    how long jobs are kept (`keep`: seconds, or None for until handled; states not named
    follow the engine's `Limits.retention`), a pass every `every` seconds, at most
    `max_batches` batches of at most `batch` jobs per pass, and the service lease held
    for `lease_for` seconds from each renewal (default: 3 pass intervals)."""

    keep: Mapping[str, float | None] = attrs.field(converter=_keep)
    every: float = attrs.field(default=DEFAULT_EVERY, validator=_every)
    batch: int = attrs.field(default=DEFAULT_BATCH)
    max_batches: int = attrs.field(default=DEFAULT_MAX_BATCHES)
    lease_for: float | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        check_int("retention batch", self.batch, low=1, high=MAX_BATCH)
        check_int("retention max_batches", self.max_batches, low=1, high=MAX_BATCHES)
        if self.lease_for is not None:
            seconds("retention lease_for", self.lease_for, positive=True)

    @property
    def lease_seconds(self) -> float:
        return self.every * LEASE_INTERVALS if self.lease_for is None else self.lease_for

    @classmethod
    def of(cls, value: RetentionPlan | Mapping[str, float | str | None]) -> RetentionPlan:
        """A plan as given, or one with default bounds for a state -> retention mapping."""
        return value if isinstance(value, RetentionPlan) else cls(keep=value)


def requests(
    kernel: Kernel,
    *,
    limit: int,
    retention: Mapping[str, float | None] | None = None,
    queue_retention: Mapping[str, Mapping[str, float | None]] | None = None,
) -> list[PruneRequest]:
    """The prune requests of one pass at the kernel's now: the default rule (the
    policy's `Limits.retention`, overridden by `retention`) for every queue without a
    rule of its own, then each queue of `queue_retention` (or of the policy's
    `Limits.queue_retention`) by its own rule over the default one."""
    now = kernel.clock.now()
    limits = kernel.policy.limits
    default = {**limits.retention, **(retention or {})}
    overrides = dict(limits.queue_retention)
    overrides.update(queue_retention or {})

    def cutoffs(rule: Mapping[str, float | None]) -> dict[str, float]:
        # only terminal states are ever pruned, whatever a rule names
        return {
            s: now - keep
            for s, keep in rule.items()
            if keep is not None and s in kernel.spec.terminal
        }

    held = waiting_states(kernel.spec) if kernel.releases else ()
    out = [
        PruneRequest(
            cutoffs=cutoffs(default), limit=limit, other_than=tuple(overrides), held_by=held
        )
    ]
    for queue, rule in sorted(overrides.items()):
        check_name("queue", queue)
        merged = {**default, **rule}
        out.append(
            PruneRequest(cutoffs=cutoffs(merged), limit=limit, queues=(queue,), held_by=held)
        )
    return out


def prune(
    kernel: Kernel,
    *,
    limit: int = 1000,
    max_batches: int = 1000,
    queue_retention: Mapping[str, Mapping[str, float | None]] | None = None,
) -> int:
    """Delete finished jobs past their retention, at most `max_batches` of `limit` per
    retention rule. A queue of `queue_retention` (or of `policy.limits.queue_retention`)
    keeps its jobs by its own rule, for the states it names, and by the default for the
    others. Returns how many jobs were deleted."""
    total = 0
    for request in requests(kernel, limit=limit, queue_retention=queue_retention):
        for _ in range(max_batches):
            n = kernel.store.prune(request)
            total += n
            if n < limit:
                break
    return total


def recorded_lease(store: object) -> ServiceLease | None:
    """The store's `retention` service lease as recorded (held or expired; `jobfsm
    status` tells which), or None: nobody took it, the last holder gave it up, or the
    store has no service leases."""
    if not isinstance(store, LeasesServices):
        return None
    return next((s for s in store.service_leases() if s.name == LEASE_NAME), None)


class Retention:
    """The automatic retention of one worker: a pass prunes only while this worker
    holds the service lease `LEASE_NAME` (`owner`), at most `plan.max_batches` batches
    of `plan.batch` jobs. One log line per pass that held the lease, and one
    `on_retention` event to the kernel's observers (the retention metrics)."""

    name = "retention"

    def __init__(self, source: KernelSource, plan: RetentionPlan, owner: str) -> None:
        if not isinstance(source.kernel.store, LeasesServices):
            raise BadInput(
                f"{type(source.kernel.store).__name__} cannot lease services: automatic "
                "retention needs a store with service leases (memory, SQLite, PostgreSQL)"
            )
        self.source = source
        self.plan = plan
        self.owner = owner
        #: whether the last pass held the lease
        self.holding = False
        #: batches the last pass ran
        self.batches = 0

    def _hold(self) -> bool:
        kernel = self.source.kernel
        store = kernel.store
        assert isinstance(store, LeasesServices)  # checked at construction
        now = kernel.clock.now()
        self.holding = store.take_service_lease(
            LEASE_NAME, self.owner, now, now + self.plan.lease_seconds
        )
        return self.holding

    def run_once(self, limit: int | None = None) -> Report:
        """One pass: take (or renew) the lease; then batches until the rules have no
        more to delete, the pass bound is reached, or the lease is lost."""
        plan = self.plan
        batch = plan.batch if limit is None else min(limit, plan.batch)
        self.batches = 0
        if not self._hold():
            return Report()
        kernel = self.source.kernel
        started = time.monotonic()
        total = 0
        full = False
        pruned: dict[tuple[str, str], int] = {}
        for request in requests(kernel, limit=batch, retention=plan.keep):
            if not request.cutoffs:
                continue  # a rule that keeps everything costs no batch
            while self.batches < plan.max_batches:
                if self.batches and not self._hold():
                    break
                n = self._prune(request, pruned)
                self.batches += 1
                total += n
                full = n >= batch
                if not full:
                    break
            if self.batches >= plan.max_batches or not self.holding:
                break
        behind = int(full and self.holding)
        log.info(
            "retention pass by %s: pruned %d job(s) in %d batch(es) of at most %d "
            "(bound %d batches) in %.3f s%s",
            self.owner,
            total,
            self.batches,
            batch,
            plan.max_batches,
            time.monotonic() - started,
            "; more are due (the next pass goes on)"
            if behind
            else ("" if self.holding else "; the lease was lost"),
        )
        kernel.observers.on_retention(pruned, kernel.clock.now())
        return Report(pruned=total, behind=behind)

    def _prune(self, request: PruneRequest, pruned: dict[tuple[str, str], int]) -> int:
        """One batch; what it deleted is added to `pruned` by (queue, state), or under
        UNKNOWN for a store that does not tell (`fsm.ports.CountsPrunes`)."""
        store = self.source.kernel.store
        if isinstance(store, CountsPrunes):
            counts = store.prune_counts(request)
        else:
            counts = {(UNKNOWN, UNKNOWN): store.prune(request)}
        for key, n in counts.items():
            if n:
                pruned[key] = pruned.get(key, 0) + n
        return sum(counts.values())

    def stop(self) -> None:
        """Give the lease up (a worker that stops hands retention over at once)."""
        store = self.source.kernel.store
        assert isinstance(store, LeasesServices)
        if store.release_service_lease(LEASE_NAME, self.owner):
            log.info("retention lease given up by %s", self.owner)
        self.holding = False
