"""`History` for the memory store: the same grouped counts as the SQL stores, counted
over the entries in the window."""

from __future__ import annotations

import json
import threading
from collections import Counter

from fsm.ports import EventCount, HistoryCounts, HistoryRequest, LatencyCount
from fsm.ports.history import cut
from fsm.records import AuditEntry, Job


class MemoryHistory:
    """Mixed into MemoryStore (reads its dicts under its lock)."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _audit: dict[str, list[AuditEntry]]

    def history_counts(self, request: HistoryRequest) -> HistoryCounts:
        counts: Counter[tuple[int, str, str, str, str]] = Counter()
        waits: dict[tuple[int, str, str], list[float]] = {}
        with self._lock:
            for job_id, trail in self._audit.items():
                job = self._jobs.get(job_id)
                if job is None:
                    continue
                for e in trail:
                    if not (request.since <= e.at < request.until) or e.outcome != "applied":
                        continue
                    b = request.bucket_of(e.at)
                    counts[(b, job.queue, job.kind, e.event, e.to_state)] += 1
                    if e.event == request.lease_event and e.fence == 1:
                        due = json.loads(trail[0].data_json).get("run_after")
                        wait = max(e.at - float(due), 0.0) if due is not None else 0.0
                        waits.setdefault((b, job.queue, job.kind), []).append(wait)
        events = [EventCount(*key, n) for key, n in counts.items()]
        latency = [LatencyCount(*key, len(w), sum(w), max(w)) for key, w in waits.items()]
        return cut(events, latency)
