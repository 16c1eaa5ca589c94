"""The investigate inbox as a workflow: each parked job with what a person needs to
decide (the event and reason code that parked it, its error, the marks its last
attempt recorded before its outside calls, the reconciler's last answer), one form
per job, and one resolve for a ticked set of jobs with one reason.

Reads are bounded: PARKED_PAGE jobs (`fsm.dashboard.views`), PARKED_TRAIL newest trail
entries each. The set resolve is `fsm.service.bulk.apply` over `Engine.resolve` (the
single-job action, audited under the operator's name), so one job that moved on
fails alone.
"""

from __future__ import annotations

from typing import Any

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import BadInput
from ..ports import ListRequest, TrailRequest
from ..records import AuditEntry, Job
from ..service import bulk
from ..service.engine import Engine
from . import security
from .actions import Actions, Pages, refused
from .views import PARKED_PAGE, PARKED_TRAIL, browser_of, operator_actions, trail_page

#: the outcomes a ticked set may be resolved as
SET_OUTCOMES = ("resolve_succeeded", "resolve_failed")
#: fields of the set-resolve form beside the ticked ids
SET_FIELDS = 8


@attrs.frozen
class Mark:
    label: str
    external_id: str | None
    at: float


@attrs.frozen
class Parked:
    """One parked job as the inbox shows it."""

    job: Job
    #: the applied entry that moved it into its parked state (None: not on the page read)
    parked_by: AuditEntry | None
    #: the marks its last attempt recorded, oldest first
    marks: tuple[Mark, ...]
    #: the newest reconciler answer on its trail (`reconcile` events)
    answer: AuditEntry | None
    actions: tuple[str, ...]

    @property
    def error(self) -> str | None:
        if self.parked_by is not None and self.parked_by.error:
            return self.parked_by.error
        return self.job.last_error


def parked(engine: Engine, job: Job) -> Parked:
    entries = trail_page(engine, TrailRequest(job.id, limit=PARKED_TRAIL)).entries
    applied = [e for e in entries if e.outcome == "applied"]
    parked_by = next((e for e in reversed(applied) if e.to_state == job.state), None)
    marks = tuple(
        Mark(str(e.data.get("label")), e.data.get("external_id"), e.at)
        for e in applied
        if e.event == "mark" and e.attempt == job.attempt
    )
    answer = next((e for e in reversed(applied) if e.event == "reconcile"), None)
    return Parked(job, parked_by, marks, answer, operator_actions(engine, job.state))


def inbox(engine: Engine) -> dict[str, Any]:
    states = sorted(engine.spec.parked)
    browser = browser_of(engine)
    if browser is None:
        return {"items": [], "parked": states, "more": False, "browsable": False}
    page = browser.list_jobs(
        ListRequest(states=tuple(states), limit=PARKED_PAGE, oldest_first=True)
    )
    items = [parked(engine, j) for j in page.jobs]
    return {
        "items": items,
        "parked": states,
        "more": page.next_cursor is not None,
        "browsable": True,
    }


class Inbox:
    """The inbox page and its set resolve."""

    def __init__(self, pages: Pages, actions: Actions) -> None:
        self.d = pages
        self.a = actions

    def routes(self) -> list[Route]:
        return [
            Route("/investigate", self.page, name="investigate"),
            Route("/investigate/resolve", self.resolve, methods=["POST"], name="resolve_set"),
        ]

    async def page(self, request: Request) -> Response:
        context = await run_in_threadpool(inbox, self.d.engine)
        context.update(outcome=None, error=None)
        return self.d.page(request, "investigate", context)

    async def resolve(self, request: Request) -> Response:
        try:
            actor, form = await self.a.checked_action(request, PARKED_PAGE + SET_FIELDS)
        except security.Refused as err:
            return refused(err)
        engine = self.d.engine
        ids = [i.strip() for i in form.get("id", []) if i.strip()]
        action = (form.get("action") or [""])[0]
        try:
            if action not in SET_OUTCOMES:
                raise BadInput(f"resolve a set as succeeded or failed, not {action[:40]!r}")
            if not ids:
                raise BadInput("tick the jobs to resolve")
            if len(ids) > PARKED_PAGE:
                raise BadInput(f"resolve at most {PARKED_PAGE} jobs at once")
            reason = security.reason_field((form.get("reason") or [""])[0])
            one = bulk.operation(engine, action, actor=actor, reason=reason)
            outcome = await run_in_threadpool(lambda: bulk.apply(action, ids, one, reason=reason))
        except BadInput as err:
            context = await run_in_threadpool(inbox, engine)
            context.update(outcome=None, error=str(err))
            return self.d.page(request, "investigate", context, 400)
        context = await run_in_threadpool(inbox, engine)
        context.update(outcome=outcome, error=None)
        return self.d.page(request, "investigate", context)
