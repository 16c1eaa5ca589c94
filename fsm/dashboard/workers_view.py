"""The workers page: each live owner (host, pid, incarnation) seen through the leases
it holds, the kinds of the jobs it holds, how many, its heartbeat age and when its
leases lapse; and the recoveries of the last hour (lapsed or dead owners' jobs taken
back, reconciler answers, rechecks), counted from the audit trail.

Bounded as the overview's live workers are: one scan of at most `views.WORKER_SCAN`
leased jobs, and the last hour's transition counts (`JobBrowser.recent_transitions`,
read from an index on the entry time).
"""

from __future__ import annotations

from typing import Any

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..ports import ScanRequest
from ..records import Job, Owner
from ..service.engine import Engine
from .actions import Pages
from .views import WINDOW, WORKER_SCAN, leased_states, recent

#: the events that take a job back from a lost run (docs/recovery.md)
RECOVERY_EVENTS = ("expire", "reconcile", "recheck")


@attrs.frozen
class Worker:
    owner: Owner
    kinds: tuple[str, ...]
    jobs_held: int
    states: tuple[tuple[str, int], ...]
    last_heartbeat: float
    lease_until: float


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
    workers, cut = live_workers(engine)
    return {"workers": workers, "cut": cut, "recoveries": recoveries(engine), "window": WINDOW}


class Workers:
    def __init__(self, pages: Pages) -> None:
        self.d = pages

    def routes(self) -> list[Route]:
        return [Route("/workers", self.page, name="workers")]

    async def page(self, request: Request) -> Response:
        context = await run_in_threadpool(context_of, self.d.engine)
        return self.d.page(request, "workers", context)
