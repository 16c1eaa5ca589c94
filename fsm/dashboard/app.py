"""The dashboard as an ASGI app (Starlette), to serve alone (`jobfsm dashboard`) or to
mount inside an application: `app.mount("/jobs", create_app(engine, token=...))`.

Pages: overview, the live lifecycle diagram, the job list, one job, the
investigate inbox. Each page's live part is also served alone as an HTML
fragment (request header `X-Jobfsm-Fragment: 1`), which `static/dashboard.js`
fetches every few seconds and swaps in: live updates without a full reload.
Templates are Jinja2 with autoescaping on, so every stored string (payloads,
errors, reasons, actors) is escaped; a Content-Security-Policy allowing only the
app's own script is sent with every page as a second guard.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..cli._common import fmt_age, fmt_time
from ..engine import Engine
from ..errors import BadInput, JobFSMError, JobNotFound
from ..records import Job
from . import security, views
from .ports import ListRequest

HERE = Path(__file__).parent
FRAGMENT_HEADER = "x-jobfsm-fragment"
#: seconds between live refreshes of a page's live part
REFRESH_SECONDS = 5
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


_DONE = {
    "requeue": "requeued",
    "resolve_succeeded": "resolved as succeeded",
    "resolve_failed": "resolved as failed",
    "cancel": "cancel applied",
}


def _done(action: str | None) -> str | None:
    """The confirmation for a redirect's `done=ACTION` (only known actions are shown)."""
    return None if action is None else _DONE.get(action)


class Dashboard:
    """The request handlers over one Engine (see `create_app`)."""

    def __init__(
        self,
        engine: Engine,
        access: security.Access,
        metrics: Any = None,
    ) -> None:
        self.engine = engine
        self.access = access
        self.metrics = metrics
        self.counts = views.CountsCache(engine.counts, now=engine.clock.now)
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")),
            autoescape=True,  # every value rendered is escaped unless marked safe
            undefined=jinja2.StrictUndefined,
        )
        self.templates = Jinja2Templates(env=env)
        env.globals.update(fmt_time=fmt_time, fmt_age=fmt_age, refresh=REFRESH_SECONDS)

    # --- rendering ------------------------------------------------------------------

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        """The full page, or only its live part when the fragment header asks for it."""
        csrf = request.cookies.get(security.CSRF_COOKIE) or security.new_csrf()
        fragment = request.headers.get(FRAGMENT_HEADER) == "1"
        context = {
            **context,
            "csrf": csrf,
            "access": self.access,
            "authorized": self.authorized(request),
            "now": self.engine.clock.now(),
            "lc": self.engine.spec,
        }
        template = f"_{name}.html" if fragment else f"{name}.html"
        response: Response = self.templates.TemplateResponse(
            request, template, context, status_code=status, headers=_HEADERS
        )
        if request.cookies.get(security.CSRF_COOKIE) != csrf:
            response.set_cookie(
                security.CSRF_COOKIE,
                csrf,
                httponly=True,
                samesite="strict",
                path=request.scope.get("root_path") or "/",
            )
        return response

    def authorized(self, request: Request) -> bool:
        return self.access.authorized(
            request.cookies.get(security.AUTH_COOKIE), request.headers.get("authorization")
        )

    # --- pages ------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        return self.page(request, "overview", {"o": views.overview(self.engine, self.counts)})

    def diagram(self, request: Request) -> Response:
        svg, error = views.diagram_svg(views.live_dot(self.engine, counts_cache=self.counts))
        return self.page(request, "diagram", {"svg": svg, "error": error})

    def jobs(self, request: Request) -> Response:
        q = request.query_params
        browser = views.browser_of(self.engine)
        filters = {k: (q.get(k) or "").strip() for k in ("state", "kind", "queue", "q", "after")}
        context: dict[str, Any] = {
            "filters": filters,
            "page": None,
            "error": None,
            "next_query": None,
            "first_query": "",
        }
        if browser is None:
            context["error"] = "this store cannot list jobs (it offers no JobBrowser)"
            return self.page(request, "jobs", context, 501)
        try:
            if filters["state"] and filters["state"] not in self.engine.spec.states:
                raise BadInput(f"unknown state {filters['state']!r}")
            req = ListRequest(
                states=(filters["state"],) if filters["state"] else None,
                kinds=(filters["kind"],) if filters["kind"] else None,
                queues=(filters["queue"],) if filters["queue"] else None,
                text=filters["q"] or None,
                after=filters["after"] or None,
            )
        except BadInput as err:
            context["error"] = str(err)
            return self.page(request, "jobs", context, 400)
        page = browser.list_jobs(req)
        context["page"] = page
        kept = {k: v for k, v in filters.items() if v and k != "after"}
        context["first_query"] = urlencode(kept)
        if page.next_cursor is not None:
            context["next_query"] = urlencode({**kept, "after": page.next_cursor})
        return self.page(request, "jobs", context)

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            view = views.job_view(self.engine, job_id)
        except JobNotFound:
            return self.page(request, "missing", {"job_id": job_id}, 404)
        svg, error = views.diagram_svg(views.live_dot(self.engine, path=view.path))
        return self.page(
            request,
            "job",
            {
                "v": view,
                "svg": svg,
                "svg_error": error,
                "done": _done(request.query_params.get("done")),
                "error": None,
            },
        )

    def investigate(self, request: Request) -> Response:
        browser = views.browser_of(self.engine)
        parked = sorted(self.engine.spec.parked)
        jobs: list[Any] = []
        more = False
        if browser is not None:
            page = browser.list_jobs(
                ListRequest(states=tuple(parked), limit=100, oldest_first=True)
            )
            jobs = [(j, views.parked_reason(self.engine, j)) for j in page.jobs]
            more = page.next_cursor is not None
        context = {"items": jobs, "parked": parked, "more": more}
        return self.page(request, "investigate", context)

    # --- actions and login ------------------------------------------------------------

    async def _checked_form(self, request: Request) -> FormData | Response:
        form = await request.form()
        if not security.same_origin(request.headers.get("origin"), request.headers.get("host")):
            return PlainTextResponse("cross-site request refused", 403, headers=_HEADERS)
        field = form.get("csrf")
        if not security.csrf_ok(
            request.cookies.get(security.CSRF_COOKIE), field if isinstance(field, str) else None
        ):
            return PlainTextResponse(
                "missing or wrong CSRF token: reload the page and try again", 403, headers=_HEADERS
            )
        return form

    async def _run(self, action: str, job_id: str, actor: str, call: Callable[[], Job]) -> Job:
        """Carry out an Engine action in a worker thread, in an operator span if traced."""

        return await run_in_threadpool(call)  # the Engine traces operator actions

    async def act(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        if not self.access.actions_enabled:
            return PlainTextResponse(
                f"actions are disabled: {self.access.why_disabled}", 403, headers=_HEADERS
            )
        if not self.authorized(request):
            return PlainTextResponse("log in with the operator token first", 401, headers=_HEADERS)
        try:
            action = str(form.get("action") or "")
            actor = security.text_field("actor", form.get("actor"), security.MAX_ACTOR)
            reason = security.text_field("reason", form.get("reason"), security.MAX_REASON)
            if action == "requeue":
                attempts = security.attempts_field(form.get("attempts"))
                await self._run(
                    "requeue",
                    job_id,
                    actor,
                    lambda: self.engine.requeue(
                        job_id, actor=actor, reason=reason, attempts=attempts
                    ),
                )
            elif action in ("resolve_succeeded", "resolve_failed"):
                outcome = action.removeprefix("resolve_")
                await self._run(
                    "resolve",
                    job_id,
                    actor,
                    lambda: self.engine.resolve(
                        job_id, outcome=outcome, actor=actor, reason=reason
                    ),
                )
            elif action == "cancel":
                await self._run(
                    "cancel",
                    job_id,
                    actor,
                    lambda: self.engine.cancel(job_id, actor=actor, reason=reason),
                )
            else:
                raise BadInput(f"unknown action {action[:40]!r}")
        except JobNotFound:
            return self.page(request, "missing", {"job_id": job_id}, 404)
        except JobFSMError as err:
            view = await run_in_threadpool(views.job_view, self.engine, job_id)
            svg, svg_error = views.diagram_svg(views.live_dot(self.engine, path=view.path))
            context = {"v": view, "svg": svg, "svg_error": svg_error, "done": None}
            return self.page(request, "job", {**context, "error": str(err)}, 409)
        target = request.url_for("job", job_id=job_id).include_query_params(done=action)
        return RedirectResponse(str(target), status_code=303)

    def login_page(self, request: Request) -> Response:
        return self.page(request, "login", {"error": None})

    async def login(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        token = form.get("token")
        if not self.access.token_matches(token if isinstance(token, str) else None):
            return self.page(request, "login", {"error": "wrong token"}, 401)
        response = RedirectResponse(str(request.url_for("overview")), status_code=303)
        response.set_cookie(
            security.AUTH_COOKIE,
            self.access.auth_value(),
            httponly=True,
            samesite="strict",
            path=request.scope.get("root_path") or "/",
        )
        return response

    def metrics_endpoint(self, request: Request) -> Response:
        if self.metrics is None:
            return PlainTextResponse(
                "metrics need prometheus_client: pip install 'jobfsm[metrics]'", 404
            )
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type)


def create_app(
    engine: Engine,
    *,
    read_only: bool = False,
    token: str | None = None,
    trust_local: bool = False,
    metrics: Any = None,
    tracer_provider: Any = None,
) -> Starlette:
    """The dashboard over `engine`, as an ASGI app.

    Actions (requeue, resolve, cancel) are enabled unless `read_only`, and need
    `token` (an operator logs in with it) unless `trust_local` is set: set it only
    when the app is reachable from this machine alone. `metrics`: a
    `fsm.telemetry.prometheus.PrometheusMetrics` to serve at /metrics. Operator
    actions are traced by the Engine (one span each, whichever surface asked) when
    opentelemetry-api is installed, through `tracer_provider` (set on the engine) or
    the global one.
    """
    if token is not None and len(token) < 8:
        raise BadInput("a dashboard token must be at least 8 characters")
    access = security.Access(read_only, token, trust_local)
    if tracer_provider is not None:
        engine.tracer_provider = tracer_provider
    d = Dashboard(engine, access, metrics)
    routes = [
        Route("/", d.overview, name="overview"),
        Route("/diagram", d.diagram, name="diagram"),
        Route("/jobs", d.jobs, name="jobs"),
        Route("/jobs/{job_id}", d.job, name="job"),
        Route("/jobs/{job_id}/act", d.act, methods=["POST"], name="act"),
        Route("/investigate", d.investigate, name="investigate"),
        Route("/login", d.login_page, name="login_page"),
        Route("/login", d.login, methods=["POST"], name="login"),
        Route("/metrics", d.metrics_endpoint, name="metrics"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.dashboard = d
    return app
