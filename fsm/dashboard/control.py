"""Operator control pages: queues (pause and resume), schedules (pause, resume, trigger
now) and bulk actions (requeue, cancel, resolve the jobs a filter selects).

Every change goes through the service's own operation (`Engine.pause`/`resume`,
`fsm.service.schedules.Schedules`, `fsm.service.bulk` over the Engine's single-job
actions), as the logged-in operator, after `Actions.checked_action` (origin,
read-only, operator, capped form, CSRF, in that order). Nothing here decides what an
action does. Global limits have their own page (`fsm.dashboard.limits_view`); the
queues page shows a limited queue's badge.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..errors import BadInput, JobFSMError
from ..inputs import check_name
from ..ports import QueuePause
from ..service import bulk
from ..service.schedules import Schedules, ScheduleView
from . import security
from .actions import Actions, Pages, refused
from .views import CountsCache, browser_of, top_queues

#: schedule changes shown under the schedules table
CHANGES_SHOWN = 20
#: what a queue or schedule control may do, and what its redirect says was done
QUEUE_ACTIONS = {"pause": "paused", "resume": "resumed"}
SCHEDULE_ACTIONS = {"pause": "disabled", "resume": "enabled", "trigger": "triggered"}
BULK_FILTERS = ("action", "state", "queue", "kind", "q")


def paused_of(pages: Pages) -> dict[str, QueuePause]:
    """The paused queues, for the badge every page shows beside a paused queue's name."""
    return pages.engine.paused()


def first(form: dict[str, list[str]], key: str) -> str:
    values = form.get(key) or [""]
    return values[0].strip()


class Control:
    """The handlers of the control pages over one dashboard."""

    def __init__(self, pages: Pages, actions: Actions, counts: CountsCache) -> None:
        self.d = pages
        self.a = actions
        self.counts = counts

    def routes(self) -> list[Route]:
        return [
            Route("/queues", self.queues, name="queues"),
            Route("/queues/act", self.queue_act, methods=["POST"], name="queue_act"),
            Route("/schedules", self.schedules, name="schedules"),
            Route("/schedules/act", self.schedule_act, methods=["POST"], name="schedule_act"),
            Route("/bulk", self.bulk_page, name="bulk"),
            Route("/bulk", self.bulk_act, methods=["POST"], name="bulk_act"),
        ]

    # --- queues -------------------------------------------------------------------------

    def queue_rows(self) -> list[dict[str, Any]]:
        counts, _taken = self.counts.get()
        paused = self.d.engine.paused()
        per_queue: dict[str, dict[str, int]] = {}
        for (queue, state), n in counts.items():
            per_queue.setdefault(queue, {})[state] = n
        shown = set(top_queues(counts)) | set(paused)
        return [
            {"queue": q, "counts": per_queue.get(q, {}), "pause": paused.get(q)}
            for q in sorted(shown)
        ]

    async def queues(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.queue_rows)
        done = request.query_params.get("done")
        context = {
            "rows": rows,
            "done": done if done in QUEUE_ACTIONS.values() else None,
            "done_queue": request.query_params.get("queue", "")[:100],
            "error": None,
        }
        return self.d.page(request, "queues", context)

    async def queue_act(self, request: Request) -> Response:
        try:
            actor, form = await self.a.checked_action(request)
        except security.Refused as err:
            return refused(err)
        action, queue = first(form, "action"), first(form, "queue")
        engine = self.d.engine
        try:
            if action not in QUEUE_ACTIONS:
                raise BadInput(f"unknown queue action {action[:40]!r}")
            check_name("queue", queue)
            reason = security.reason_field(first(form, "reason"))
            call = engine.pause if action == "pause" else engine.resume
            await run_in_threadpool(lambda: call(queue, actor=actor, reason=reason))
        except JobFSMError as err:
            rows = await run_in_threadpool(self.queue_rows)
            context = {"rows": rows, "done": None, "done_queue": "", "error": str(err)}
            return self.d.page(request, "queues", context, 400)
        target = request.url_for("queues").include_query_params(
            done=QUEUE_ACTIONS[action], queue=queue
        )
        return RedirectResponse(str(target), status_code=303)

    # --- schedules ----------------------------------------------------------------------

    def schedule_context(self) -> dict[str, Any]:
        try:
            keeper = Schedules(self.d.engine)
            views: list[ScheduleView] = keeper.list()
            changes = keeper.changes(limit=CHANGES_SHOWN)
        except BadInput as err:  # a store that keeps no schedules
            return {"views": [], "changes": [], "unsupported": str(err)}
        return {"views": views, "changes": changes, "unsupported": None}

    async def schedules(self, request: Request) -> Response:
        context = await run_in_threadpool(self.schedule_context)
        done = request.query_params.get("done")
        context["done"] = done if done in SCHEDULE_ACTIONS.values() else None
        context["done_name"] = request.query_params.get("name", "")[:100]
        context["job_id"] = (request.query_params.get("job") or "")[:26]
        context["error"] = None
        return self.d.page(request, "schedules", context)

    async def schedule_act(self, request: Request) -> Response:
        try:
            actor, form = await self.a.checked_action(request)
        except security.Refused as err:
            return refused(err)
        action, name = first(form, "action"), first(form, "name")
        keeper = Schedules(self.d.engine)
        job_id = ""
        try:
            if action not in SCHEDULE_ACTIONS:
                raise BadInput(f"unknown schedule action {action[:40]!r}")
            reason = security.reason_field(first(form, "reason"))
            if action == "trigger":
                job = await run_in_threadpool(
                    lambda: keeper.trigger(name, actor=actor, reason=reason)
                )
                job_id = job.id
            else:
                change = keeper.pause if action == "pause" else keeper.resume
                if not await run_in_threadpool(lambda: change(name, actor=actor, reason=reason)):
                    raise BadInput(f"no schedule named {name[:100]!r}")
        except JobFSMError as err:
            context = await run_in_threadpool(self.schedule_context)
            context.update(done=None, done_name="", job_id="", error=str(err))
            return self.d.page(request, "schedules", context, 400)
        target = request.url_for("schedules").include_query_params(
            done=SCHEDULE_ACTIONS[action], name=name, job=job_id
        )
        return RedirectResponse(str(target), status_code=303)

    # --- bulk actions -------------------------------------------------------------------

    def selection(self, values: dict[str, str]) -> bulk.Selection:
        state = values.get("state", "")
        if state not in self.d.engine.spec.states:
            raise BadInput(f"choose the state of the jobs to act on (got {state[:40]!r})")
        return bulk.Selection(
            state=state,
            queue=values.get("queue") or None,
            kind=values.get("kind") or None,
            text=values.get("q") or None,
        )

    def allowed(self, action: str, state: str) -> None:
        """BadInput unless the spec allows `action` from `state` (for the preview: the
        engine checks each job again when it acts)."""
        event = "resolve" if action.startswith("resolve_") else action
        if action not in bulk.ACTIONS:
            raise BadInput(f"choose an action: {', '.join(bulk.ACTIONS)}")
        if state not in self.d.engine.spec.sources(event):
            raise BadInput(f"the lifecycle has no {event} from {state}: no job would change")

    def preview(self, values: dict[str, str]) -> dict[str, Any]:
        browser = browser_of(self.d.engine)
        if browser is None:
            raise BadInput("this store cannot list jobs (it offers no JobBrowser)")
        selection = self.selection(values)
        self.allowed(values.get("action", ""), selection.state)
        ids, more = bulk.select(browser, selection)
        return {"count": len(ids), "more": more}

    async def bulk_page(self, request: Request) -> Response:
        values = {k: (request.query_params.get(k) or "").strip()[:255] for k in BULK_FILTERS}
        context: dict[str, Any] = {
            "values": values,
            "preview": None,
            "outcome": None,
            "error": None,
            "max_bulk": bulk.MAX_BULK,
            "actions": bulk.ACTIONS,
            "again": "",
        }
        status = 200
        if values["state"] or values["action"]:
            try:
                context["preview"] = await run_in_threadpool(self.preview, values)
            except BadInput as err:
                context["error"] = str(err)
                status = 400
        return self.d.page(request, "bulk", context, status)

    async def bulk_act(self, request: Request) -> Response:
        try:
            actor, form = await self.a.checked_action(request)
        except security.Refused as err:
            return refused(err)
        values = {k: first(form, k)[:255] for k in BULK_FILTERS}
        context: dict[str, Any] = {
            "values": values,
            "preview": None,
            "outcome": None,
            "error": None,
            "max_bulk": bulk.MAX_BULK,
            "actions": bulk.ACTIONS,
            "again": "",
        }
        try:
            reason = security.reason_field(first(form, "reason"))
            action = values["action"]
            attempts = security.attempts_field(first(form, "attempts") or "1")
            browser = browser_of(self.d.engine)
            if browser is None:
                raise BadInput("this store cannot list jobs (it offers no JobBrowser)")
            selection = self.selection(values)
            self.allowed(action, selection.state)
            one = bulk.operation(
                self.d.engine, action, actor=actor, reason=reason, attempts=attempts
            )

            def run() -> bulk.Outcome:
                ids, more = bulk.select(browser, selection)
                return bulk.apply(action, ids, one, reason=reason, more=more)

            context["outcome"] = await run_in_threadpool(run)
        except BadInput as err:
            context["error"] = str(err)
            return self.d.page(request, "bulk", context, 400)
        context["again"] = urlencode({k: v for k, v in values.items() if v})
        return self.d.page(request, "bulk", context)
