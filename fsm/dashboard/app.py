"""The dashboard as an ASGI app (Starlette), to serve alone (`jobfsm dashboard`) or to
mount inside an application: `app.mount("/jobs", create_app(engine, tokens=...))`.

Pages: overview, the live lifecycle diagram, the job list, one job, the
investigate inbox, and the control pages (queues, limits, schedules, bulk). Each
page's live part is also served alone as an HTML fragment (request header
`X-Jobfsm-Fragment: 1`), which `static/dashboard.js` fetches again a few seconds
after the previous answer and swaps in. Templates are
Jinja2 with autoescaping on, so every stored string (payloads, errors, reasons,
actors) is escaped; a Content-Security-Policy allowing only the app's own script
is sent with every page as a second guard. Who may see and do what is
`fsm.dashboard.security` (the checks, in order) and `fsm.dashboard.auth` (tokens,
sessions, the login rate limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..display.format import fmt_age, fmt_time
from ..errors import BadInput, JobNotFound
from ..ports import ListRequest
from ..service.engine import Engine
from . import (
    actions,
    auth,
    control,
    deps_view,
    history,
    inbox,
    lifecycle_view,
    limits_view,
    search,
    security,
    views,
    workers_view,
)
from .render import Renderer

HERE = Path(__file__).parent
FRAGMENT_HEADER = "x-jobfsm-fragment"
#: seconds between the end of one live refresh and the start of the next
REFRESH_SECONDS = 5
#: paths anyone may fetch: the log-in page and the static files
OPEN_PATHS = ("/login", "/static/")
#: characters of an audit entry's actor, reason or error shown in a job's trail table
#: (a page of TRAIL_PAGE entries stays well under a megabyte whatever they hold)
ENTRY_TEXT = 200


class Dashboard:
    """The request handlers over one Engine (see `create_app`)."""

    def __init__(
        self,
        engine: Engine,
        access: actions.Access,
        metrics: Any = None,
        refresh: int = REFRESH_SECONDS,
    ) -> None:
        self.engine = engine
        self.access = access
        self.metrics = metrics
        self.counts = views.CountsCache(engine.counts, now=engine.clock.now)
        self.renderer = Renderer()
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")),
            autoescape=True,  # every value rendered is escaped unless marked safe
            undefined=jinja2.StrictUndefined,
        )
        self.templates = Jinja2Templates(env=env)
        env.globals.update(fmt_time=fmt_time, fmt_age=fmt_age, refresh=refresh, cut=ENTRY_TEXT)

    # --- rendering ------------------------------------------------------------------

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        """The full page, or only its live part when the fragment header asks for it."""
        operator = self.access.operator(request)
        csrf, cookie = self.access.csrf_token(request)
        fragment = request.headers.get(FRAGMENT_HEADER) == "1"
        # read for those who may see pages: an anonymous log-in page reads no store
        readable = operator is not None or self.access.public_read
        context = {
            **context,
            "csrf": csrf,
            "access": self.access,
            "operator": operator,
            "authorized": operator is not None and self.access.actions_enabled,
            "now": self.engine.clock.now(),
            "lc": self.engine.spec,
            "paused": control.paused_of(self) if readable else {},
            "limits": limits_view.limit_map(self.engine.kernel) if readable else {},
        }
        template = f"_{name}.html" if fragment else f"{name}.html"
        response: Response = self.templates.TemplateResponse(
            request, template, context, status_code=status, headers=security.HEADERS
        )
        if cookie:
            response.set_cookie(
                security.CSRF_COOKIE, csrf, **actions.cookie_options(request, max_age=None)
            )
        return response

    # --- pages ------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        return self.page(request, "overview", {"o": views.overview(self.engine, self.counts)})

    def diagram(self, request: Request) -> Response:
        try:
            lifecycle = lifecycle_view.lifecycle_view(
                self.engine,
                self.counts,
                self.renderer,
                request.query_params.get("window", lifecycle_view.DEFAULT_WINDOW),
                request.url_for("jobs").path,
            )
        except BadInput as err:
            return PlainTextResponse(str(err), 400, headers=security.HEADERS)
        context = {
            "lifecycle": lifecycle,
            "windows": list(lifecycle_view.WINDOWS),
            "wide_sources": lifecycle_view.WIDE_SOURCES,
        }
        return self.page(request, "diagram", context)

    def history(self, request: Request) -> Response:
        q = request.query_params
        try:
            h = history.history_view(self.engine, q.get("window"), q.get("queue"), q.get("kind"))
        except BadInput as err:
            return PlainTextResponse(str(err), 400, headers=security.HEADERS)
        context = {
            "h": h,
            "windows": list(history.WINDOWS),
            "chart_w": history.CHART_W,
            "chart_h": history.CHART_H,
            "pad_l": history.PAD_L,
            "pad_b": history.PAD_B,
            "pad_t": history.PAD_T,
        }
        return self.page(request, "history", context)

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
                raise BadInput(f"unknown state {filters['state'][:40]!r}")
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

    def job_context(self, job_id: str, before: int | None, machine: bool = False) -> dict[str, Any]:
        """A job page's context: the job, one page of its trail, its own path drawn and,
        when asked (`machine`), the whole lifecycle with the path on it."""
        view = views.job_view(self.engine, job_id, before=before)
        svg, error = lifecycle_view.job_path_svg(self.engine, self.renderer, view)
        full: tuple[str | None, str | None] = (None, None)
        if machine:
            key = ("job", view.job.id, view.job.version, before)
            full = self.renderer.svg(key, lambda: views.live_dot(self.engine, path=view.path))
        return {
            "deps": deps_view.dependencies_view(self.engine, view.job),
            "v": view,
            "svg": svg,
            "svg_error": error,
            "machine": machine,
            "machine_svg": full[0],
            "machine_error": full[1],
            "steps": lifecycle_view.path_of(view.history),
            "done": None,
            "error": None,
        }

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        raw = request.query_params.get("before")
        try:
            before = None if raw is None else int(raw) if raw.isdigit() else -1
            machine = request.query_params.get("machine") == "1"
            context = self.job_context(job_id, before, machine)
        except JobNotFound:
            return self.page(request, "missing", {"job_id": job_id}, 404)
        except BadInput as err:
            return PlainTextResponse(str(err), 400, headers=security.HEADERS)
        context["done"] = actions.done_text(request.query_params.get("done"))
        return self.page(request, "job", context)

    def metrics_endpoint(self, request: Request) -> Response:
        if self.metrics is None:
            return PlainTextResponse(
                "metrics need prometheus_client: pip install 'jobfsm[metrics]'", 404
            )
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})


class Gate:
    """ASGI middleware: every path but OPEN_PATHS needs an operator (pages and /metrics
    are open too with `public_read`; a POST always needs one)."""

    def __init__(self, app: Any, access: actions.Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = actions.app_path(request)
        reading = scope["method"] in ("GET", "HEAD")
        if path.startswith(OPEN_PATHS) or path == "/logout":
            await self.app(scope, receive, send)
            return
        if (reading and self.access.public_read) or self.access.operator(request) is not None:
            await self.app(scope, receive, send)
            return
        response: Response
        if path == "/metrics" or not reading or request.headers.get(FRAGMENT_HEADER) == "1":
            response = PlainTextResponse(
                "log in first (or send Authorization: Bearer TOKEN)",
                401,
                headers={**security.HEADERS, "WWW-Authenticate": "Bearer"},
            )
        else:
            target = path + (f"?{request.url.query}" if request.url.query else "")
            login = f"{scope.get('root_path', '')}/login?{urlencode({'next': target})}"
            response = RedirectResponse(login, 303, headers=security.HEADERS)
        await response(scope, receive, send)


def create_app(
    engine: Engine,
    *,
    tokens: Mapping[str, str] | None = None,
    token: str | None = None,
    authenticator: auth.Authenticator | None = None,
    read_only: bool = False,
    public_read: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    session_ttl: float = auth.SESSION_TTL,
    refresh: int = REFRESH_SECONDS,
    metrics: Any = None,
    tracer_provider: Any = None,
) -> Starlette:
    """The dashboard over `engine`, as an ASGI app.

    Who is an operator: `tokens` (operator name -> token, each at least 16 random
    characters; `token=` is one token named `operator`), logged in at /login or sent
    as `Authorization: Bearer TOKEN`, and/or `authenticator` (request -> operator
    name or None: the application's own user when mounted, e.g. `auth.app_user`).
    One of them is required. Every page needs an operator unless `public_read`;
    actions (requeue, resolve, cancel) always do, and are refused when `read_only`.
    The operator is the actor of each action in the audit trail.

    `allowed_hosts`: the Host names the app answers to (default localhost, 127.0.0.1,
    ::1; `["*"]` leaves the check to the application). `metrics`: a
    `fsm.telemetry.prometheus.PrometheusMetrics` to serve at /metrics. Operator
    actions are traced by the Engine (one span each) when opentelemetry-api is
    installed, through `tracer_provider` (set on the engine) or the global one.
    """
    named = dict(tokens or {})
    if token is not None:
        if auth.DEFAULT_OPERATOR in named:
            raise BadInput("give token= or a token named 'operator' in tokens=, not both")
        named[auth.DEFAULT_OPERATOR] = token
    if not named and authenticator is None:
        raise BadInput(
            "the dashboard needs operator tokens (tokens=/token=) or an authenticator: "
            "no page or action is anonymous"
        )
    if not 1 <= refresh <= 3600:
        raise BadInput(f"refresh must be 1 to 3600 seconds, got {refresh!r}")
    access = actions.Access(
        tokens=auth.Tokens(named) if named else None,
        authenticator=authenticator,
        sessions=auth.Sessions(session_ttl),
        limiter=auth.LoginLimiter(),
        read_only=read_only,
        public_read=public_read,
        hosts=security.allowed_hosts(allowed_hosts),
    )
    if tracer_provider is not None:
        engine.tracer_provider = tracer_provider
    d = Dashboard(engine, access, metrics, refresh)
    a = actions.Actions(d)
    routes = [
        Route("/", d.overview, name="overview"),
        Route("/diagram", d.diagram, name="diagram"),
        Route("/history", d.history, name="history"),
        Route("/jobs", d.jobs, name="jobs"),
        Route("/jobs/{job_id}", d.job, name="job"),
        Route("/jobs/{job_id}/act", a.act, methods=["POST"], name="act"),
        *inbox.Inbox(d, a).routes(),
        Route("/login", a.login_page, name="login_page"),
        Route("/login", a.login, methods=["POST"], name="login"),
        Route("/logout", a.logout, methods=["POST"], name="logout"),
        Route("/metrics", d.metrics_endpoint, name="metrics"),
        *control.Control(d, a, d.counts).routes(),
        *limits_view.Limits(d, a).routes(),
        *search.Search(d).routes(),
        *workers_view.Workers(d).routes(),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Gate, access=access)
    app.add_middleware(security.Guard, hosts=access.hosts)
    app.state.dashboard = d
    return app
