"""What the dashboard pages show, read through `fsm.Engine` and the `JobBrowser` port.

No web framework here: each function returns plain records the templates render
(and the tests check). Every read is bounded: pages by `ports.MAX_PAGE`, the
live-worker view by WORKER_SCAN, displayed payloads by PAYLOAD_CAP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..diagram import DiagramError, Edge, path_steps, render_dot, render_image
from ..engine import Engine
from ..ports import ScanRequest
from ..progress import Progress, progress_of
from ..records import AuditEntry, Job, Owner
from .ports import JobBrowser, ListRequest, TransitionCount

#: the window of the throughput and failure-rate figures (seconds)
WINDOW = 3600.0
#: most leased jobs the live-worker view reads (bounds a very busy fleet's cost)
WORKER_SCAN = 5000
#: characters of a payload, result or error shown on a page (the rest is cut, said so)
PAYLOAD_CAP = 16_384
#: seconds a (queue, state) count may be old before a request starts a refresh
COUNTS_TTL = 5.0

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


def browser_of(engine: Engine) -> JobBrowser | None:
    """The store's JobBrowser capability, or None if it does not declare one."""
    store = engine.store
    return store if isinstance(store, JobBrowser) else None


def recent(engine: Engine, now: float) -> list[TransitionCount]:
    browser = browser_of(engine)
    return [] if browser is None else browser.recent_transitions(now - WINDOW)


def leased_states(engine: Engine) -> tuple[str, ...]:
    """States that hold a lease: those a heartbeat renews (from the spec)."""
    return tuple(src for (src, event) in engine.spec.table if event == "heartbeat")


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


def overview(engine: Engine, counts_cache: CountsCache | None = None) -> Overview:
    lc = engine.spec
    now = engine.clock.now()
    counts, counted_at = (counts_cache or CountsCache(engine.counts)).get()
    queues = tuple(sorted({q for q, _s in counts}))
    totals = {s: sum(n for (_q, st), n in counts.items() if st == s) for s in lc.states}
    finished: dict[str, int] = dict.fromkeys(sorted(lc.terminal), 0)
    rejected = 0
    for c in recent(engine, now):
        if c.outcome == "applied" and c.to_state in lc.terminal:
            finished[c.to_state] += c.count
        elif c.outcome != "applied":
            rejected += c.count
    done = finished.get("succeeded", 0) + finished.get("failed", 0)
    browser = browser_of(engine)
    oldest: dict[str, Job] = {}
    if browser is not None:
        for q in queues:
            if counts.get((q, lc.initial)):
                page = browser.list_jobs(
                    ListRequest(states=(lc.initial,), queues=(q,), limit=1, oldest_first=True)
                )
                if page.jobs:
                    oldest[q] = page.jobs[0]
    views, cut = workers(engine)
    return Overview(
        now=now,
        counted_at=counted_at,
        queues=queues,
        states=lc.states,
        counts=counts,
        totals=totals,
        finished=finished,
        failure_rate=None if done == 0 else finished.get("failed", 0) / done,
        rejected=rejected,
        oldest_queued=oldest,
        workers=tuple(views),
        workers_truncated=cut,
        browsable=browser is not None,
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


def diagram_svg(dot: str) -> tuple[str | None, str | None]:
    """(inline SVG, None), or (None, why not) when Graphviz cannot draw it."""
    try:
        svg = render_image(dot, "svg").decode("utf-8")
    except DiagramError as err:
        return None, str(err)
    start = svg.find("<svg")  # drop the XML prolog and DOCTYPE for inline use
    return (svg[start:] if start >= 0 else svg), None


def capped(text: str | None, cap: int = PAYLOAD_CAP) -> tuple[str, bool]:
    """JSON text pretty-printed when it is small enough, cut to `cap` characters."""
    if text is None:
        return "", False
    shown = text
    if len(text) <= cap:
        try:
            shown = json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
        except ValueError:
            shown = text
    return shown[:cap], len(shown) > cap


@attrs.frozen
class JobView:
    job: Job
    history: tuple[AuditEntry, ...]
    rejected: tuple[AuditEntry, ...]
    path: Mapping[Edge, list[int]]
    payload: tuple[str, bool]
    result: tuple[str, bool]
    actions: tuple[str, ...]
    #: the latest progress its handler reported, and its value as capped JSON text
    progress: Progress | None = None
    progress_text: tuple[str, bool] = ("", False)


#: the operator actions the dashboard offers, as the Engine (and the CLI) carry them out
ACTIONS = ("requeue", "resolve", "cancel")


def operator_actions(engine: Engine, state: str) -> tuple[str, ...]:
    """The actions the spec allows from `state`."""
    return tuple(a for a in ACTIONS if (state, a) in engine.spec.table)


def job_view(engine: Engine, job_id: str) -> JobView:
    job = engine.get(job_id)
    history = engine.history(job_id)
    progress = progress_of(job)
    return JobView(
        job=job,
        history=tuple(history),
        rejected=tuple(e for e in history if e.outcome != "applied"),
        path=path_steps(history),
        payload=capped(job.payload_json),
        result=capped(job.result_json),
        actions=operator_actions(engine, job.state),
        progress=progress,
        progress_text=capped(None if progress is None else json.dumps(progress.value)),
    )


def parked_reason(engine: Engine, job: Job) -> dict[str, Any]:
    """Why a job sits in a parked state: the audit entry that put it there."""
    for entry in reversed(engine.history(job.id)):
        if entry.outcome == "applied" and entry.to_state == job.state:
            return {
                "event": entry.event,
                "at": entry.at,
                "error": entry.error or job.last_error,
                "reason": entry.reason,
                "actor": entry.actor,
                "code": entry.code,
            }
    return {
        "event": None,
        "at": None,
        "error": job.last_error,
        "reason": None,
        "actor": None,
        "code": None,
    }
