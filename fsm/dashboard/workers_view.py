"""The workers page: each live owner (host, pid, incarnation) seen through the leases
it holds, the kinds of the jobs it holds, how many, its heartbeat age and when its
leases lapse; the kinds each worker handles (its scheduler's beat, `SchedulerBeat`,
which also lists live workers that hold no job); the recoveries of the last hour by the
owner that lost the run (each `expire` entry names it, `AuditEntry.lost_owner`); and
the recoveries of the last hour counted by transition (lapsed or dead owners' jobs
taken back, reconciler answers, rechecks).

Bounded as the overview's live workers are: one scan of at most `views.WORKER_SCAN`
leased jobs, the store's scheduler beats (one row per worker process, forgotten an hour
after it was last seen), the newest RECOVERY_ROWS `expire` entries of the last hour
(`RecentEntries`, read from an index on the entry time) and the last hour's
transition counts (`JobBrowser.recent_transitions`).
"""

from __future__ import annotations

from typing import Any

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..ports import HoldsSchedules, RecentEntries, RecentRequest, ScanRequest, SchedulerBeat
from ..records import AuditEntry, Job, Owner
from ..service.engine import Engine
from ..service.schedules import LIVE_FOR
from .actions import Pages
from .views import WINDOW, WORKER_SCAN, leased_states, recent

#: the events that take a job back from a lost run (docs/recovery.md)
RECOVERY_EVENTS = ("expire", "reconcile", "recheck")
#: the event whose entry names the owner that lost the run
LOST_EVENT = "expire"
#: most `expire` entries of the window the page reads (the newest)
RECOVERY_ROWS = 200
#: recoveries listed per owner (the rest are counted)
PER_OWNER = 10


@attrs.frozen
class Worker:
    owner: Owner
    kinds: tuple[str, ...]
    jobs_held: int
    states: tuple[tuple[str, int], ...]
    last_heartbeat: float
    lease_until: float
    #: the kinds its worker handles, from its scheduler's beat (None: no beat seen)
    handles: tuple[str, ...] | None = None
    #: recoveries of the window of jobs it held (of the RECOVERY_ROWS read)
    recovered: int = 0


@attrs.frozen
class IdleWorker:
    """A live worker (its scheduler beat within LIVE_FOR) that holds no lease."""

    name: str
    handles: tuple[str, ...]
    seen: float


@attrs.frozen
class LostBy:
    """The recoveries of the window of jobs one owner held; `owner` None for entries
    written before recoveries named the owner."""

    owner: Owner | None
    live: bool
    count: int
    entries: tuple[AuditEntry, ...]
    #: when a recovery of the window found it dead (its pid gone, its liveness token
    #: free); None if none did
    dead_at: float | None = None

    @property
    def anchor(self) -> str:
        return "lost-unknown" if self.owner is None else f"lost-{self.owner.incarnation}"


def live_workers(engine: Engine) -> tuple[list[Worker], bool]:
    """The owners of the leases held now; (workers, whether the scan was cut)."""
    held = engine.scan(ScanRequest(states=leased_states(engine), limit=WORKER_SCAN))
    by_owner: dict[Owner, list[Job]] = {}
    for job in held:
        if job.owner is not None:
            by_owner.setdefault(job.owner, []).append(job)
    workers = []
    for owner, jobs in by_owner.items():
        states: dict[str, int] = {}
        for j in jobs:
            states[j.state] = states.get(j.state, 0) + 1
        workers.append(
            Worker(
                owner=owner,
                kinds=tuple(sorted({j.kind for j in jobs})),
                jobs_held=len(jobs),
                states=tuple(sorted(states.items())),
                last_heartbeat=max(j.updated_at for j in jobs),
                lease_until=max(j.lease_until or 0.0 for j in jobs),
            )
        )
    workers.sort(key=lambda w: (w.owner.host, w.owner.pid, w.owner.incarnation))
    return workers, len(held) >= WORKER_SCAN


def beats(engine: Engine, now: float) -> dict[str, SchedulerBeat]:
    """The live workers' scheduler beats by owner name (`str(Owner)`); empty when the
    store keeps no schedulers."""
    store = engine.store
    if not isinstance(store, HoldsSchedules):
        return {}
    return {b.owner: b for b in store.schedulers() if now - b.at <= LIVE_FOR}


def lost_runs(engine: Engine, now: float) -> list[AuditEntry] | None:
    """The newest RECOVERY_ROWS `expire` entries of the window (None: the store cannot
    say)."""
    store = engine.store
    if not isinstance(store, RecentEntries):
        return None
    return store.recent_entries(RecentRequest((LOST_EVENT,), now - WINDOW, RECOVERY_ROWS))


def by_lost_owner(entries: list[AuditEntry], live: set[Owner]) -> list[LostBy]:
    """`entries` (newest first) grouped by the owner that lost the run, the owners with
    the newest recovery first; each keeps its newest PER_OWNER entries."""
    groups: dict[Owner | None, list[AuditEntry]] = {}
    for e in entries:
        groups.setdefault(e.lost_owner, []).append(e)
    return [
        LostBy(owner, owner in live, len(found), tuple(found[:PER_OWNER]), _dead_at(found))
        for owner, found in groups.items()
    ]


def _dead_at(entries: list[AuditEntry]) -> float | None:
    """The newest time a recovery confirmed the owner dead (`verdict` "dead")."""
    return max((e.at for e in entries if e.data.get("verdict") == "dead"), default=None)


def recoveries(engine: Engine) -> list[dict[str, Any]]:
    """The recovery transitions of the last WINDOW seconds, by (event, from, to, outcome)."""
    found = [c for c in recent(engine, engine.clock.now()) if c.event in RECOVERY_EVENTS]
    found.sort(key=lambda c: (-c.count, c.event, str(c.from_state), c.to_state))
    rows = [
        {"event": c.event, "from": c.from_state, "to": c.to_state, "outcome": c.outcome}
        | {"count": c.count}
        for c in found
    ]
    return rows


def context_of(engine: Engine) -> dict[str, Any]:
    now = engine.clock.now()
    workers, cut = live_workers(engine)
    seen = beats(engine, now)
    entries = lost_runs(engine, now)
    lost = [] if entries is None else by_lost_owner(entries, {w.owner for w in workers})
    counts = {g.owner: g.count for g in lost}
    named = {str(w.owner) for w in workers}
    workers = [
        attrs.evolve(
            w,
            handles=None if str(w.owner) not in seen else seen[str(w.owner)].kinds,
            recovered=counts.get(w.owner, 0),
        )
        for w in workers
    ]
    # a beat older than a recovery that confirmed its owner dead is a dead worker's
    dead = {str(g.owner): g.dead_at for g in lost if g.owner is not None and g.dead_at}
    idle = [
        IdleWorker(name, b.kinds, b.at)
        for name, b in sorted(seen.items())
        if name not in named and not b.at <= dead.get(name, float("-inf"))
    ]
    return {
        "workers": workers,
        "cut": cut,
        "idle": idle,
        "lost": lost,
        "lost_known": entries is not None,
        "lost_cut": entries is not None and len(entries) >= RECOVERY_ROWS,
        "per_owner": PER_OWNER,
        "recoveries": recoveries(engine),
        "window": WINDOW,
    }


class Workers:
    def __init__(self, pages: Pages) -> None:
        self.d = pages

    def routes(self) -> list[Route]:
        return [Route("/workers", self.page, name="workers")]

    async def page(self, request: Request) -> Response:
        context = await run_in_threadpool(context_of, self.d.engine)
        return self.d.page(request, "workers", context)
