"""Metrics: the counters jobfsm keeps, as a protocol a back end implements.

`fsm.telemetry.observers.MetricsObserver` feeds one from the event contract;
`fsm.telemetry.prometheus.PrometheusMetrics` exports them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Protocol


class Metrics(Protocol):
    """What the engine and the worker count. Implement it by subclassing `MetricsBase`,
    which gives every hook after the first two a no-op body (hooks may be added)."""

    def transition(self, kind: str, event: str, from_state: str | None, to_state: str) -> None: ...
    def attempt_seconds(self, kind: str, outcome: str, seconds: float) -> None: ...
    def lease_renewals(self, renewed: int, lost: int) -> None: ...
    def lease_lost(self, kind: str) -> None: ...
    def recovery(self, verdict: str, to_state: str) -> None: ...
    def rejected_report(self, kind: str, event: str) -> None: ...
    def delivery_recovery(self, delivery: str, reason: str) -> None: ...
    def transition_code(self, kind: str, event: str, to_state: str, code: str) -> None: ...
    def retention_pass(self, pruned: Mapping[tuple[str, str], int], at: float) -> None: ...
    def queue_wait(self, queue: str, seconds: float) -> None: ...


class MetricsBase:
    """No-op bodies for every hook of `Metrics`; a metrics class overrides what it counts."""

    def transition(self, kind: str, event: str, from_state: str | None, to_state: str) -> None:
        """An applied transition (audited or not)."""

    def attempt_seconds(self, kind: str, outcome: str, seconds: float) -> None:
        """An attempt ended with `outcome` (an `fsm.ports.OUTCOMES` name) after `seconds`."""

    def lease_renewals(self, renewed: int, lost: int) -> None:
        """One heartbeat round: `renewed` leases extended, `lost` found moved."""

    def lease_lost(self, kind: str) -> None:
        """A worker found a lease of a job of `kind` taken from it (fence moved)."""

    def recovery(self, verdict: str, to_state: str) -> None:
        """The recovery sweep took a job back: `verdict` why ("lapsed", "dead", ...)."""

    def rejected_report(self, kind: str, event: str) -> None:
        """A stale report (old fence) was rejected and recorded; nothing changed."""

    def delivery_recovery(self, delivery: str, reason: str) -> None:
        """A delivery (e.g. "rabbitmq") reconnected or repaired lost wake-ups."""

    def transition_code(self, kind: str, event: str, to_state: str, code: str) -> None:
        """An audited transition with its reason code (specs/job.toml [codes])."""

    def retention_pass(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        """A retention pass that held the lease ended at `at` (seconds since the epoch),
        having deleted `pruned`: (queue, state) -> jobs (docs/retention.md)."""

    def queue_wait(self, queue: str, seconds: float) -> None:
        """An attempt of a job of `queue` started `seconds` after the job was due
        (`fsm.telemetry.observers.wait_seconds`)."""


class CountingMetrics(MetricsBase):
    """In-process metrics: transition counters and attempt timings (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.transitions: Counter[tuple[str, str, str | None, str]] = Counter()
        self.attempts: Counter[tuple[str, str]] = Counter()
        self.attempt_total: dict[tuple[str, str], float] = {}

    def transition(self, kind: str, event: str, from_state: str | None, to_state: str) -> None:
        with self._lock:
            self.transitions[(kind, event, from_state, to_state)] += 1

    def attempt_seconds(self, kind: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self.attempts[(kind, outcome)] += 1
            key = (kind, outcome)
            self.attempt_total[key] = self.attempt_total.get(key, 0.0) + seconds
