"""The observer port: the one event contract of the engine and the worker."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from ..records import AuditEntry, Job


@runtime_checkable
class Observer(Protocol):
    """What the engine and the worker tell of what happens, as one event contract.

    Loggers, metrics and tracing attach as observers (`fsm.telemetry.observers`); the
    service knows no exporter. `on_transition` is the one transition hook: every
    decision written (submit, lease, start, reports, recovery, operator actions) and
    every rejected stale report (`entry.outcome == "rejected"`) passes through it once,
    after it is durable. Subclass `fsm.telemetry.observers.ObserverBase`, which gives
    every hook a no-op body (hooks may be added).
    """

    def on_transition(self, job: Job, entry: AuditEntry) -> None:
        """`job` as written, and the audit entry of the transition."""
        ...

    def on_attempt(self, job: Job, status: str, error: str | None, seconds: float) -> None:
        """An attempt of `job` ended with `status` (an `OUTCOMES` name) after `seconds`."""
        ...

    def on_renewals(self, renewed: int, lost: int) -> None:
        """One heartbeat round of a worker: leases extended, leases found moved."""
        ...

    def on_lease_lost(self, kind: str) -> None:
        """A worker found a lease of a job of `kind` taken from it (its fence moved)."""
        ...

    def on_recovery(self, verdict: str, to_state: str) -> None:
        """The recovery sweep took a job back (`verdict`: "lapsed", "dead", ...)."""
        ...

    def on_delivery_recovery(self, delivery: str, reason: str) -> None:
        """A delivery (e.g. "rabbitmq") reconnected or repaired lost wake-ups."""
        ...

    def on_retention(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        """A worker's retention pass that held the service lease ended at `at` (the
        kernel's clock), having deleted `pruned`: (queue, state) -> jobs (docs/retention.md)."""
        ...

    def operator(self, action: str, target: str, actor: str) -> AbstractContextManager[object]:
        """Around an operator action on `target` (a job id or a queue): a span, say."""
        ...
