"""What the dashboard pages show, read through `fsm.Engine` and the `JobBrowser` port.

No web framework here: each function returns plain records the templates render
(and the tests check). Every read is bounded, whatever the store holds: job lists
by `ports.MAX_PAGE`, a job's audit trail by TRAIL_PAGE entries a page, the overview
by TOP_QUEUES queues (the rest summed as one row, their oldest jobs read in one
grouped query), the investigate inbox by PARKED_PAGE jobs of PARKED_TRAIL entries
each, the live-worker view by WORKER_SCAN leases, displayed payloads by PAYLOAD_CAP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping

import attrs

from ..display.diagram import Edge, path_steps, render_dot
from ..display.format import capped, error_stage
from ..ports import (
    BoundedReads,
    JobBrowser,
    ListRequest,
    ScanRequest,
    TrailPage,
    TrailRequest,
    TransitionCount,
    trail_of,
)
from ..records import AuditEntry, Job, Owner
from ..service.engine import Engine
from ..service.progress import Progress, progress_of

#: the window of the throughput and failure-rate figures (seconds)
WINDOW = 3600.0
#: most leased jobs the live-worker view reads (bounds a very busy fleet's cost)
WORKER_SCAN = 5000
#: characters of a payload, result or error shown on a page (the rest is cut, said so)
PAYLOAD_CAP = 16_384
#: seconds a (queue, state) count may be old before a request starts a refresh
COUNTS_TTL = 5.0
#: audit entries on one job page (older ones are a link away)
TRAIL_PAGE = 500
#: queues the overview lists one by one (the most jobs first); the rest are one row
TOP_QUEUES = 50
#: parked jobs the investigate inbox lists, and trail entries read for each (room for an
#: attempt's marks, at most 16, the reconciler's answers and the entry that parked it)
PARKED_PAGE = 100
PARKED_TRAIL = 60

Counts = dict[tuple[str, str], int]


class CountsCache:
    """`Store.counts()` served from memory, refreshed in the background.

    Counting a million finished rows takes a PostgreSQL server 50-200 ms, more than
    a page should wait on every poll of every open tab. The first request counts;
    later ones get the last count at once and, when it is older than `ttl`, start
    one background refresh (never two at a time). Counts are thus at most about
    `ttl` plus one count's time old; pages show when they were taken.
    """

    def __init__(
        self,
        counts: Callable[[], Counts],
        ttl: float = COUNTS_TTL,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._counts = counts
        self._ttl = ttl
        self._now = now
        self._lock = threading.Lock()
        self._value: Counts | None = None
        self._taken = 0.0
        self._refreshing = False

    def _refresh(self) -> None:
        try:
            value, taken = self._counts(), self._now()
            with self._lock:
                self._value, self._taken = value, taken
        finally:
            with self._lock:
                self._refreshing = False

    def get(self) -> tuple[Counts, float]:
        """(counts, when they were taken)."""
        with self._lock:
            value, taken = self._value, self._taken
            stale = value is not None and self._now() - taken >= self._ttl
            start = stale and not self._refreshing
            if start:
                self._refreshing = True
        if value is None:
            value, taken = self._counts(), self._now()
            with self._lock:
                self._value, self._taken = value, taken
            return value, taken
        if start:
            threading.Thread(target=self._refresh, name="jobfsm-counts", daemon=True).start()
        return value, taken


@attrs.frozen
class WorkerView:
    owner: Owner
    jobs_held: int
    last_heartbeat: float
    lease_until: float


@attrs.frozen
class Overview:
    now: float
    counted_at: float
    queues: tuple[str, ...]
    states: tuple[str, ...]
    counts: Mapping[tuple[str, str], int]
    totals: Mapping[str, int]
    finished: Mapping[str, int]
    failure_rate: float | None
    rejected: int
    oldest_queued: Mapping[str, Job]
    workers: tuple[WorkerView, ...]
    workers_truncated: bool
    browsable: bool
    #: queues past TOP_QUEUES, and their jobs per state summed
    other_queues: int = 0
    other: Mapping[str, int] = attrs.field(factory=dict)


def browser_of(engine: Engine) -> JobBrowser | None:
    """The store's JobBrowser capability, or None if it does not declare one."""
    store = engine.store
    return store if isinstance(store, JobBrowser) else None


def reads_of(engine: Engine) -> BoundedReads | None:
    """The store's BoundedReads capability, or None if it does not declare one."""
    store = engine.store
    return store if isinstance(store, BoundedReads) else None


def recent(engine: Engine, now: float) -> list[TransitionCount]:
    browser = browser_of(engine)
    return [] if browser is None else browser.recent_transitions(now - WINDOW)


def leased_states(engine: Engine) -> tuple[str, ...]:
    """States that hold a lease: those a heartbeat renews (from the spec)."""
    return engine.spec.sources("heartbeat")


def workers(engine: Engine) -> tuple[list[WorkerView], bool]:
    """Live owners seen through the leases they hold; (views, whether the scan was cut)."""
    held = engine.scan(ScanRequest(states=leased_states(engine), limit=WORKER_SCAN))
    by_owner: dict[Owner, list[Job]] = {}
    for job in held:
        if job.owner is not None:
            by_owner.setdefault(job.owner, []).append(job)
    views = [
        WorkerView(
            owner=owner,
            jobs_held=len(jobs),
            last_heartbeat=max(j.updated_at for j in jobs),
            lease_until=max(j.lease_until or 0.0 for j in jobs),
        )
        for owner, jobs in by_owner.items()
    ]
    views.sort(key=lambda w: (w.owner.host, w.owner.pid))
    return views, len(held) >= WORKER_SCAN


def top_queues(counts: Mapping[tuple[str, str], int], top: int = TOP_QUEUES) -> list[str]:
    """The `top` queues holding the most jobs (ties by name): the ones listed one by one."""
    per_queue: dict[str, int] = {}
    for (queue, _state), n in counts.items():
        per_queue[queue] = per_queue.get(queue, 0) + n
    return sorted(per_queue, key=lambda q: (-per_queue[q], q))[:top]


def oldest_queued(engine: Engine, queues: list[str], counts: Counts) -> dict[str, Job]:
    """The oldest queued job of each of `queues` that has one: one grouped query."""
    initial = engine.spec.initial
    wanted = tuple(q for q in queues if counts.get((q, initial)))
    if not wanted:
        return {}
    reads = reads_of(engine)
    if reads is not None:
        return reads.oldest_jobs(initial, wanted)
    browser = browser_of(engine)
    oldest: dict[str, Job] = {}
    if browser is not None:  # a store without BoundedReads: a page per queue
        for q in wanted:
            page = browser.list_jobs(
                ListRequest(states=(initial,), queues=(q,), limit=1, oldest_first=True)
            )
            if page.jobs:
                oldest[q] = page.jobs[0]
    return oldest


def overview(engine: Engine, counts_cache: CountsCache | None = None) -> Overview:
    lc = engine.spec
    now = engine.clock.now()
    counts, counted_at = (counts_cache or CountsCache(engine.counts)).get()
    shown = top_queues(counts)
    listed = set(shown)
    totals = dict.fromkeys(lc.states, 0)
    other: dict[str, int] = dict.fromkeys(lc.states, 0)
    for (q, st), n in counts.items():
        totals[st] = totals.get(st, 0) + n
        if q not in listed:
            other[st] = other.get(st, 0) + n
    finished: dict[str, int] = dict.fromkeys(sorted(lc.terminal), 0)
    rejected = 0
    for c in recent(engine, now):
        if c.outcome == "applied" and c.to_state in lc.terminal:
            finished[c.to_state] += c.count
        elif c.outcome != "applied":
            rejected += c.count
    done = finished.get("succeeded", 0) + finished.get("failed", 0)
    views, cut = workers(engine)
    return Overview(
        now=now,
        counted_at=counted_at,
        queues=tuple(sorted(shown)),
        states=lc.states,
        counts=counts,
        totals=totals,
        finished=finished,
        failure_rate=None if done == 0 else finished.get("failed", 0) / done,
        rejected=rejected,
        oldest_queued=oldest_queued(engine, shown, counts),
        workers=tuple(views),
        workers_truncated=cut,
        browsable=browser_of(engine) is not None,
        other_queues=len({q for q, _s in counts}) - len(shown),
        other=other,
    )


def live_dot(
    engine: Engine,
    *,
    path: Mapping[Edge, list[int]] | None = None,
    counts_cache: CountsCache | None = None,
) -> str:
    """The lifecycle as DOT: edges counted over the last WINDOW (or one job's path),
    states labelled with how many jobs are in them now."""
    lc = engine.spec
    if path is not None:
        dot = render_dot(lc, path=path)
        extra: list[str] = []
    else:
        edges: dict[Edge, int] = {}
        for c in recent(engine, engine.clock.now()):
            if c.outcome == "applied":
                key = (c.from_state, c.event, c.to_state)
                edges[key] = edges.get(key, 0) + c.count
        dot = render_dot(lc, counts=edges, title="transitions in the last hour; jobs per state now")
        totals: dict[str, int] = {}
        counts, _taken = (counts_cache or CountsCache(engine.counts)).get()
        for (_q, state), n in counts.items():
            totals[state] = totals.get(state, 0) + n
        # A node declared again takes the new label (DOT merges node attributes).
        extra = [f'  {s} [label="{s}\\n{totals.get(s, 0)}"];' for s in lc.states]
    body = dot.rstrip()
    assert body.endswith("}")
    return body[:-1] + "\n".join(extra) + "\n}\n"


@attrs.frozen
class JobView:
    job: Job
    #: the entries of this page of the trail, in the order they were written
    history: tuple[AuditEntry, ...]
    rejected: tuple[AuditEntry, ...]
    path: Mapping[Edge, list[int]]
    payload: tuple[str, bool]
    result: tuple[str, bool]
    actions: tuple[str, ...]
    #: the latest progress its handler reported, and its value as capped JSON text
    progress: Progress | None = None
    progress_text: tuple[str, bool] = ("", False)
    #: the cursor of the page of older entries (None: this page starts the trail)
    older: int | None = None
    #: the cursor this page was read at (None: the newest page)
    before: int | None = None
    #: where its last_error came from ("stage handler, attempt 2"), if this page shows it
    error_stage: str = ""


#: the operator actions the dashboard offers, as the Engine (and the CLI) carry them out
ACTIONS = ("requeue", "resolve", "cancel")


def operator_actions(engine: Engine, state: str) -> tuple[str, ...]:
    """The actions the spec allows from `state`."""
    return tuple(a for a in ACTIONS if state in engine.spec.sources(a))


def trail_page(engine: Engine, request: TrailRequest) -> TrailPage:
    """One page of a job's trail: from the store's BoundedReads, else cut from the whole
    history (what is sent stays bounded either way)."""
    reads = reads_of(engine)
    if reads is not None:
        return reads.trail_page(request)
    return trail_of(engine.history(request.job_id), request)


def job_view(
    engine: Engine, job_id: str, *, before: int | None = None, limit: int = TRAIL_PAGE
) -> JobView:
    """A job and one page of its trail (the newest TRAIL_PAGE entries unless `before`)."""
    job = engine.get(job_id)
    page = trail_page(engine, TrailRequest(job_id, before=before, limit=limit))
    history = page.entries
    progress = progress_of(job)
    return JobView(
        job=job,
        history=history,
        rejected=tuple(e for e in history if e.outcome != "applied"),
        path=path_steps(history),
        payload=capped(job.payload_json, PAYLOAD_CAP),
        result=capped(job.result_json, PAYLOAD_CAP),
        actions=operator_actions(engine, job.state),
        progress=progress,
        progress_text=capped(None if progress is None else json.dumps(progress.value), PAYLOAD_CAP),
        older=page.older,
        before=before,
        error_stage=error_stage(job.last_error, history),
    )
