"""`fsm.ports.LimitsClaims` for the memory store: limits, their changes and the rate
windows in dicts behind its lock; the claim asks `budget` what it may lease."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from fsm.lifecycle.limits import Budget, Limit, LimitChange, applicable, window_start
from fsm.ports import ClaimRequest
from fsm.records import Job

from .claiming import rate_marks


class MemoryLimits:
    """Mixed into MemoryStore, which sets `_lock`, `_jobs` and the state index."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _limits: dict[str, Limit]
    _limit_changes: list[LimitChange]
    _limit_leases: dict[str, list[float]]

    def _in_states(self, states: tuple[str, ...]) -> list[Job]:
        raise NotImplementedError  # MemoryStore's

    def _change(self, key: str, before: Limit | None, after: Limit | None, by: Limit) -> None:
        self._limit_changes.append(
            LimitChange(
                seq=len(self._limit_changes) + 1,
                key=key,
                at=by.at,
                actor=by.actor,
                reason=by.reason,
                origin=by.origin,
                before=None if before is None else before.describe(),
                after=None if after is None else after.describe(),
            )
        )

    def set_limit(self, limit: Limit) -> Limit | None:
        with self._lock:
            before = self._limits.get(limit.key)
            self._limits[limit.key] = limit
            self._change(limit.key, before, limit, limit)
            return before

    def clear_limit(self, key: str, *, actor: str, reason: str, at: float) -> Limit | None:
        with self._lock:
            before = self._limits.pop(key, None)
            if before is not None:
                self._change(key, before, None, Limit(key, actor=actor, reason=reason, at=at))
            self._limit_leases.pop(key, None)
            return before

    def limits(self) -> dict[str, Limit]:
        with self._lock:
            return dict(self._limits)

    def limit_changes(self, key: str | None = None, limit: int = 100) -> list[LimitChange]:
        with self._lock:
            found = [c for c in self._limit_changes if key is None or c.key == key]
            return found[::-1][: max(0, limit)]

    def limit_usage(
        self, keys: Sequence[str], held: tuple[str, ...], waiting: tuple[str, ...]
    ) -> dict[str, tuple[int, int]]:
        with self._lock:
            out = dict.fromkeys(keys, (0, 0))
            for states, slot in ((held, 0), (waiting, 1)):
                for job in self._in_states(states):
                    for k in (f"kind:{job.kind}", f"queue:{job.queue}"):
                        if k in out:
                            counts = list(out[k])
                            counts[slot] += 1
                            out[k] = (counts[0], counts[1])
            return out

    def _budget(self, request: ClaimRequest) -> tuple[Budget, list[Limit]] | None:
        """The claim's budget (under the lock), or None when no limit applies."""
        limits = applicable(self._limits, request.queues, request.kinds)
        if not limits and not request.caps:
            return None
        held: dict[str, int] = {}
        for job in self._in_states(request.held_states):
            for k in (f"kind:{job.kind}", f"queue:{job.queue}"):
                held[k] = held.get(k, 0) + 1
        recent: dict[str, int] = {}
        for lim in limits:
            start = window_start(lim, request.now)
            if start is not None:
                times = [t for t in self._limit_leases.get(lim.key, []) if t > start]
                self._limit_leases[lim.key] = times  # older leases never count again
                recent[lim.key] = len(times)
        return Budget.of(limits, held, recent, request.caps), limits

    def _mark(self, limits: Sequence[Limit], jobs: Sequence[Job], now: float) -> None:
        for key, at in rate_marks(limits, jobs, now):
            self._limit_leases.setdefault(key, []).append(at)
