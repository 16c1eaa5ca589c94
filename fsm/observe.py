"""Logging and metrics: one structured record per transition."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Protocol

from .records import AuditEntry, Job

logger = logging.getLogger("fsm.transitions")


class Metrics(Protocol):
    def transition(self, kind: str, event: str, from_state: str | None, to_state: str) -> None: ...
    def attempt_seconds(self, kind: str, outcome: str, seconds: float) -> None: ...


class CountingMetrics:
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


def log_transition(job: Job, entry: AuditEntry) -> None:
    if entry.outcome == "rejected":
        logger.warning(
            "job %s: rejected %s (%s)",
            job.id,
            entry.event,
            entry.error,
            extra={"jobfsm": _extra(job, entry)},
        )
        return
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "job %s %s: %s -> %s",
            job.id,
            entry.event,
            entry.from_state,
            entry.to_state,
            extra={"jobfsm": _extra(job, entry)},
        )


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
    }
