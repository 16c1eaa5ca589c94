"""`JobBrowser` and `BoundedReads` for the memory store: the dashboard's job list, recent
counts, trail pages and oldest jobs per queue."""

from __future__ import annotations

import threading
from collections import Counter

from fsm.ports import (
    JobPage,
    ListRequest,
    RecentRequest,
    TrailPage,
    TrailRequest,
    TransitionCount,
    check_queues,
    page_of,
    trail_of,
)
from fsm.records import AuditEntry, Job


def matches(job: Job, request: ListRequest) -> bool:
    """Whether `job` passes the request's filters (the cursor aside)."""
    if request.states is not None and job.state not in request.states:
        return False
    if request.kinds is not None and job.kind not in request.kinds:
        return False
    if request.queues is not None and job.queue not in request.queues:
        return False
    if request.text is not None:
        prefix = request.id_prefix
        by_id = prefix is not None and job.id.startswith(prefix)
        return by_id or request.text in (job.idempotency_key, job.correlation_id)
    return True


class MemoryBrowse:
    """Mixed into MemoryStore: reads its dicts under its lock (a linear walk)."""

    _lock: threading.RLock
    _jobs: dict[str, Job]
    _audit: dict[str, list[AuditEntry]]

    def list_jobs(self, request: ListRequest) -> JobPage:
        with self._lock:
            jobs = [j for j in self._jobs.values() if matches(j, request)]
        jobs.sort(key=lambda j: j.id, reverse=not request.oldest_first)
        if request.after is not None:
            after = request.after
            jobs = [j for j in jobs if (j.id > after if request.oldest_first else j.id < after)]
        return page_of(jobs[: request.limit + 1], request)

    def recent_transitions(self, since: float) -> list[TransitionCount]:
        counts: Counter[tuple[str | None, str, str, str]] = Counter()
        with self._lock:
            for trail in self._audit.values():
                for e in trail:
                    if e.at >= since:
                        counts[(e.from_state, e.event, e.to_state, e.outcome)] += 1
        return [TransitionCount(*key, n) for key, n in sorted(counts.items(), key=str)]

    def recent_entries(self, request: RecentRequest) -> list[AuditEntry]:
        events = set(request.events)
        with self._lock:
            found = [
                (e.at, n, e)
                for trail in self._audit.values()
                for n, e in enumerate(trail)
                if e.at >= request.since and e.event in events and e.outcome == "applied"
            ]
        found.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [e for _, _, e in found[: request.limit]]

    def trail_page(self, request: TrailRequest) -> TrailPage:
        with self._lock:
            return trail_of(self._audit.get(request.job_id, []), request)

    def oldest_jobs(self, state: str, queues: tuple[str, ...]) -> dict[str, Job]:
        wanted = set(check_queues(queues))
        oldest: dict[str, Job] = {}
        with self._lock:
            for job in self._jobs.values():
                if job.state == state and job.queue in wanted:
                    seen = oldest.get(job.queue)
                    if seen is None or job.id < seen.id:
                        oldest[job.queue] = job
        return oldest
