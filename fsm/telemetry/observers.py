"""Observers: the log, metrics and spans attached to the one event contract.

`fsm.ports.Observer` is what the engine and the worker tell; this module has the
observers jobfsm ships and `Observers`, the fan-out a kernel holds:

- `LogObserver`: one structured record per transition on the `fsm.transitions`
  logger (job id, kind, event, from, to, attempt, fence, owner, actor, correlation
  id, outcome, code and the error's first line in `extra["jobfsm"]`), a warning for
  every rejected stale report;
- `MetricsObserver`: feeds a `fsm.telemetry.metrics.Metrics` (counters of
  transitions, reason codes, rejected reports, attempts, renewals, recoveries,
  retention passes, and each start's wait, `wait_seconds`);
- `fsm.telemetry.tracing.TracingObserver`: OpenTelemetry spans of attempts and of
  operator actions.

`Observers` calls, for each event, only the observers that override its hook, so an
event nobody listens to costs one empty loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from ..ports import Observer
from ..records import AuditEntry, Job
from ..text import first_line
from .metrics import Metrics

logger = logging.getLogger("fsm.transitions")

_HOOKS = (
    "on_transition",
    "on_attempt",
    "on_renewals",
    "on_lease_lost",
    "on_recovery",
    "on_delivery_recovery",
    "on_retention",
    "operator",
)


class ObserverBase:
    """No-op bodies for every hook of `fsm.ports.Observer`; override what you watch."""

    def on_transition(self, job: Job, entry: AuditEntry) -> None:
        """A transition written (or a stale report rejected)."""

    def on_attempt(self, job: Job, status: str, error: str | None, seconds: float) -> None:
        """An attempt ended."""

    def on_renewals(self, renewed: int, lost: int) -> None:
        """One heartbeat round."""

    def on_lease_lost(self, kind: str) -> None:
        """A lease found taken."""

    def on_recovery(self, verdict: str, to_state: str) -> None:
        """A job taken back by the recovery sweep."""

    def on_delivery_recovery(self, delivery: str, reason: str) -> None:
        """A delivery reconnected or repaired lost wake-ups."""

    def on_retention(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        """A retention pass that held the lease ended."""

    def operator(self, action: str, target: str, actor: str) -> AbstractContextManager[object]:
        """Around an operator action."""
        return contextlib.nullcontext()


def _overrides(observer: object, hook: str) -> bool:
    mine = getattr(type(observer), hook, None)
    return mine is not None and mine is not getattr(ObserverBase, hook)


class Observers(ObserverBase):
    """A fixed list of observers, called in order for every event. An observer that
    raises is logged and skipped: telemetry never fails a transition already durable."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.members: tuple[Observer, ...] = tuple(observers)
        self._by_hook: dict[str, tuple[Any, ...]] = {
            hook: tuple(getattr(o, hook) for o in self.members if _overrides(o, hook))
            for hook in _HOOKS
        }
        self._transition = self._by_hook["on_transition"]

    def including(self, *more: Observer) -> Observers:
        """These observers and `more` (a new fan-out)."""
        return Observers((*self.members, *more))

    def without(self, kind: type) -> Observers:
        """These observers less those of type `kind`."""
        return Observers(o for o in self.members if not isinstance(o, kind))

    def find(self, kind: type) -> Any:
        """The first member of type `kind`, or None."""
        return next((o for o in self.members if isinstance(o, kind)), None)

    def _each(self, hook: str, *args: Any) -> None:
        for call in self._by_hook[hook]:
            try:
                call(*args)
            except Exception:
                logger.exception("observer %r failed on %s", call, hook)

    def on_transition(self, job: Job, entry: AuditEntry) -> None:
        for call in self._transition:  # the hottest event: no indirection
            try:
                call(job, entry)
            except Exception:
                logger.exception("observer %r failed on a transition of %s", call, job.id)

    def on_attempt(self, job: Job, status: str, error: str | None, seconds: float) -> None:
        self._each("on_attempt", job, status, error, seconds)

    def on_renewals(self, renewed: int, lost: int) -> None:
        self._each("on_renewals", renewed, lost)

    def on_lease_lost(self, kind: str) -> None:
        self._each("on_lease_lost", kind)

    def on_recovery(self, verdict: str, to_state: str) -> None:
        self._each("on_recovery", verdict, to_state)

    def on_delivery_recovery(self, delivery: str, reason: str) -> None:
        self._each("on_delivery_recovery", delivery, reason)

    def on_retention(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        self._each("on_retention", pruned, at)

    @contextlib.contextmanager
    def _nested(self, action: str, target: str, actor: str) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for call in self._by_hook["operator"]:
                stack.enter_context(call(action, target, actor))
            yield

    def operator(self, action: str, target: str, actor: str) -> AbstractContextManager[object]:
        if not self._by_hook["operator"]:
            return contextlib.nullcontext()
        return self._nested(action, target, str(actor))


# --- the log -------------------------------------------------------------------------

#: characters of an error's first line in a transition's log record
LOG_ERROR_CHARS = 200


def log_text(text: str | None) -> str:
    """The one rule for outside text in a record of this logger: its first line,
    escaped (`fsm.text.first_line`), so an error or reason cannot add a line of its own."""
    return first_line(text, LOG_ERROR_CHARS)


def _extra(job: Job, entry: AuditEntry) -> dict[str, object]:
    return {
        "job_id": job.id,
        "kind": job.kind,
        "event": entry.event,
        "from": entry.from_state,
        "to": entry.to_state,
        "attempt": entry.attempt,
        "fence": entry.fence,
        "owner": str(job.owner) if job.owner else None,
        "actor": entry.actor,
        "correlation_id": entry.correlation_id,
        "outcome": entry.outcome,
        "code": entry.code,
        "error": None if entry.error is None else log_text(entry.error),
    }


class LogObserver(ObserverBase):
    """One record per transition on the `fsm.transitions` logger (INFO; a rejected stale
    report is a WARNING), with the transition's fields in `extra["jobfsm"]`."""

    def on_transition(self, job: Job, entry: AuditEntry) -> None:
        if entry.outcome == "rejected":
            logger.warning(
                "job %s: rejected %s (%s)",
                job.id,
                entry.event,
                log_text(entry.error),
                extra={"jobfsm": _extra(job, entry)},
            )
            return
        if not logger.isEnabledFor(logging.INFO):
            return
        if entry.error:
            logger.info(
                "job %s %s: %s -> %s: %s",
                job.id,
                entry.event,
                entry.from_state,
                entry.to_state,
                log_text(entry.error),
                extra={"jobfsm": _extra(job, entry)},
            )
            return
        logger.info(
            "job %s %s: %s -> %s",
            job.id,
            entry.event,
            entry.from_state,
            entry.to_state,
            extra={"jobfsm": _extra(job, entry)},
        )


# --- metrics -------------------------------------------------------------------------


#: the `kind` label of every job whose kind the engine does not know (docs/metrics.md):
#: a submitter choosing kind names cannot add series without bound
UNREGISTERED = "unregistered"


def wait_seconds(job: Job, entry: AuditEntry) -> float:
    """How long the attempt that `entry` (a `start`) began waited: from when the job
    was due, the later of its submit (`created_at`) and its `run_after`, to the start.

    A retry is due at the `run_after` its failure set, so its wait counts from there,
    not from its submit; a job submitted to run later waits from its `run_after`. The
    clocks of the submitter and the worker may differ: a start that seems to come
    before the job was due waited 0 s."""
    return max(0.0, entry.at - max(job.created_at, job.run_after))


class MetricsObserver(ObserverBase):
    """Feeds a `Metrics` (its hooks keep their names: a Metrics class is an observer's
    back end, so metrics written for earlier versions keep working).

    With `known_kinds` (the engine's registered kinds, read at each event), a kind not
    in it is counted as `UNREGISTERED`, so the kind labels are bounded by the kinds the
    process registered; without it, kinds are passed as they are."""

    def __init__(
        self, metrics: Metrics, known_kinds: Callable[[], Container[str]] | None = None
    ) -> None:
        self.metrics = metrics
        self._known = known_kinds

    def _kind(self, kind: str) -> str:
        if self._known is None or kind in self._known():
            return kind
        return UNREGISTERED

    def on_transition(self, job: Job, entry: AuditEntry) -> None:
        kind = self._kind(job.kind)
        if entry.outcome == "rejected":
            self.metrics.rejected_report(kind, entry.event)
            return
        self.metrics.transition(kind, entry.event, entry.from_state, entry.to_state)
        if entry.code is not None:
            self.metrics.transition_code(kind, entry.event, entry.to_state, entry.code)
        if entry.event == "start":
            self.metrics.queue_wait(job.queue, wait_seconds(job, entry))

    def on_attempt(self, job: Job, status: str, error: str | None, seconds: float) -> None:
        self.metrics.attempt_seconds(self._kind(job.kind), status, seconds)

    def on_renewals(self, renewed: int, lost: int) -> None:
        self.metrics.lease_renewals(renewed, lost)

    def on_lease_lost(self, kind: str) -> None:
        self.metrics.lease_lost(self._kind(kind))

    def on_recovery(self, verdict: str, to_state: str) -> None:
        self.metrics.recovery(verdict, to_state)

    def on_delivery_recovery(self, delivery: str, reason: str) -> None:
        self.metrics.delivery_recovery(delivery, reason)

    def on_retention(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        self.metrics.retention_pass(pruned, at)
