"""Log-in, log-out and operator actions, each checked in `fsm.dashboard.security`'s
order (origin, read-only, operator, then the capped body and its CSRF token); and
`Access`, which tells who a request comes from."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Protocol

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from ..errors import JobFSMError, JobNotFound
from ..records import Job
from ..service import bulk
from ..service.engine import Engine
from . import auth, security

#: a login form is a token and a CSRF field: its body is small
MAX_LOGIN_BYTES = 4096
#: the scope key a request's identity is kept under once worked out
_IDENTITY = "jobfsm.identity"
_DONE = {
    "requeue": "requeued",
    "resolve_succeeded": "resolved as succeeded",
    "resolve_failed": "resolved as failed",
    "cancel": "cancel applied",
}


def done_text(action: str | None) -> str | None:
    """The confirmation for a redirect's `done=ACTION` (only known actions are shown)."""
    return None if action is None else _DONE.get(action)


def app_path(request: Request) -> str:
    """The request's path inside the dashboard (without the mount point)."""
    path: str = request.scope["path"]
    root: str = request.scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def cookie_options(request: Request, *, max_age: int | None) -> dict[str, Any]:
    """HttpOnly, SameSite=Strict, `Secure` when the page came over TLS, scoped to the app."""
    return {
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
        "path": request.scope.get("root_path") or "/",
        "max_age": max_age,
    }


def client_of(request: Request) -> str:
    return request.client.host if request.client else "?"


@attrs.frozen
class Access:
    """The dashboard's access settings, and who a request comes from."""

    tokens: auth.Tokens | None
    authenticator: auth.Authenticator | None
    sessions: auth.Sessions
    limiter: auth.LoginLimiter
    read_only: bool = False
    public_read: bool = False
    hosts: frozenset[str] = frozenset(security.DEFAULT_HOSTS)

    @property
    def actions_enabled(self) -> bool:
        return not self.read_only

    @property
    def why_disabled(self) -> str | None:
        return "read-only mode" if self.read_only else None

    def identify(self, request: Request) -> tuple[str, str, str] | None:
        """(operator, how, subject) or None; `how` is "app", "bearer" or "session", and
        `subject` what its CSRF token is bound to. Worked out once per request."""
        scope = request.scope
        if _IDENTITY in scope:
            found: tuple[str, str, str] | None = scope[_IDENTITY]
            return found
        found = self._identify(request)
        scope[_IDENTITY] = found
        return found

    def _identify(self, request: Request) -> tuple[str, str, str] | None:
        if self.authenticator is not None:
            name = self.authenticator(request)
            if name is not None:
                return name, "app", f"app:{name}"
        header = request.headers.get("authorization") or ""
        if self.tokens is not None and header[:7].lower() == "bearer ":
            client = client_of(request)
            if self.limiter.retry_after(client) > 0:
                return None
            name = self.tokens.who(header[7:].strip())
            if name is None:
                self.limiter.failed(client)
                return None
            return name, "bearer", ""
        sid = request.cookies.get(security.SESSION_COOKIE)
        name = self.sessions.operator(sid)
        if name is not None and sid is not None:
            return name, "session", f"session:{sid}"
        return None

    def operator(self, request: Request) -> str | None:
        found = self.identify(request)
        return None if found is None else found[0]

    def csrf_token(self, request: Request) -> tuple[str, bool]:
        """(the CSRF token the page's forms carry, whether to set it as a cookie): bound
        to the operator's session (or application user) once logged in; before that a
        random cookie the log-in form repeats."""
        found = self.identify(request)
        if found is not None and found[2]:
            return self.sessions.csrf(found[2]), False
        cookie = request.cookies.get(security.CSRF_COOKIE)
        return (cookie, False) if cookie else (secrets.token_urlsafe(32), True)

    def csrf_ok(self, request: Request, field: str | None) -> bool:
        found = self.identify(request)
        if found is not None and found[1] == "bearer":
            return True  # a header a browser never adds by itself: no CSRF to fear
        expected, _new = self.csrf_token(request)
        if found is None and not request.cookies.get(security.CSRF_COOKIE):
            return False
        return bool(field) and secrets.compare_digest(expected, str(field))


def refused(err: security.Refused) -> Response:
    return PlainTextResponse(err.message, err.status, headers={**security.HEADERS, **err.headers})


class Pages(Protocol):
    """What the actions need of the dashboard's pages (`fsm.dashboard.app.Dashboard`)."""

    engine: Engine
    access: Access

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response: ...

    def job_context(self, job_id: str, before: int | None) -> dict[str, Any]: ...


class Actions:
    """The handlers that change something: log-in, log-out and operator actions."""

    def __init__(self, dashboard: Pages) -> None:
        self.d = dashboard
        self.access = dashboard.access

    def _origin(self, request: Request) -> None:
        if not security.same_origin(request.headers, self.access.hosts):
            raise security.Refused(403, "cross-site request refused")

    def _limited(self, request: Request) -> None:
        wait = self.access.limiter.retry_after(client_of(request))
        if wait > 0:
            raise security.Refused(
                429,
                "too many failed log-ins: try again in a minute",
                {"Retry-After": str(max(1, round(wait)))},
            )

    async def _checked_form(self, request: Request, limit: int) -> dict[str, str]:
        form = await security.read_form(request, limit)
        if not self.access.csrf_ok(request, form.get("csrf")):
            raise security.Refused(403, "missing or wrong CSRF token: reload the page and retry")
        return form

    async def checked_action(
        self, request: Request, max_fields: int = security.MAX_FORM_FIELDS
    ) -> tuple[str, dict[str, list[str]]]:
        """(operator, form) of a request that changes something, after every check in
        `fsm.dashboard.security`'s order; `security.Refused` if one fails. For the
        actions of other modules (`fsm.dashboard.control`)."""
        self._origin(request)
        if self.access.read_only:
            raise security.Refused(403, "actions are disabled: read-only mode")
        actor = self.access.operator(request)
        if actor is None:
            raise security.Refused(401, "log in first", {"WWW-Authenticate": "Bearer"})
        fields = await security.read_fields(request, security.MAX_FORM_BYTES, max_fields)
        first = fields.get("csrf") or [""]
        if not self.access.csrf_ok(request, first[0]):
            raise security.Refused(403, "missing or wrong CSRF token: reload the page and retry")
        return actor, fields

    # --- operator actions -------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            actor, fields = await self.checked_action(request)
        except security.Refused as err:
            return refused(err)
        form = {k: v[0] for k, v in fields.items()}
        action = form.get("action", "")
        try:
            reason = security.reason_field(form.get("reason"))
            call = self._call(action, job_id, actor, reason, form)
            await run_in_threadpool(call)  # the Engine traces operator actions
        except JobNotFound:
            return self.d.page(request, "missing", {"job_id": job_id}, 404)
        except JobFSMError as err:
            context = await run_in_threadpool(self.d.job_context, job_id, None)
            return self.d.page(request, "job", {**context, "error": str(err)}, 409)
        target = request.url_for("job", job_id=job_id).include_query_params(done=action)
        return RedirectResponse(str(target), status_code=303)

    def _call(
        self, action: str, job_id: str, actor: str, reason: str, form: dict[str, str]
    ) -> Callable[[], Job]:
        attempts = security.attempts_field(form.get("attempts")) if action == "requeue" else 1
        one = bulk.operation(self.d.engine, action, actor=actor, reason=reason, attempts=attempts)
        return lambda: one(job_id)

    # --- log-in and log-out -----------------------------------------------------------

    def _logged_in(self, request: Request, name: str, target: str) -> Response:
        self.access.sessions.close(request.cookies.get(security.SESSION_COOKIE))
        sid = self.access.sessions.open(name)
        root = request.scope.get("root_path", "")
        response = RedirectResponse(f"{root}{target or '/'}", status_code=303)
        ttl = int(self.access.sessions.ttl)
        response.set_cookie(security.SESSION_COOKIE, sid, **cookie_options(request, max_age=ttl))
        return response

    async def login_page(self, request: Request) -> Response:
        given = request.query_params.get("token")
        target = security.safe_next(request.query_params.get("next"))
        if given is not None and self.access.tokens is not None:
            # the link `jobfsm dashboard` prints: typed or opened, never sent by a page
            try:
                self._limited(request)
                if request.headers.get("sec-fetch-site") not in (None, "none", "same-origin"):
                    raise security.Refused(403, "a log-in link works only when opened directly")
            except security.Refused as err:
                return refused(err)
            name = self.access.tokens.who(given)
            if name is not None:
                return self._logged_in(request, name, target)
            self.access.limiter.failed(client_of(request))
            return self.d.page(request, "login", {"error": "wrong token", "next": target}, 401)
        return self.d.page(request, "login", {"error": None, "next": target})

    async def login(self, request: Request) -> Response:
        try:
            self._origin(request)
            self._limited(request)
            if self.access.tokens is None:
                raise security.Refused(404, "this dashboard logs in through its application")
            form = await self._checked_form(request, MAX_LOGIN_BYTES)
        except security.Refused as err:
            return refused(err)
        target = security.safe_next(form.get("next"))
        name = self.access.tokens.who(form.get("token"))
        if name is None:
            self.access.limiter.failed(client_of(request))
            return self.d.page(request, "login", {"error": "wrong token", "next": target}, 401)
        return self._logged_in(request, name, target)

    async def logout(self, request: Request) -> Response:
        try:
            self._origin(request)
            if self.access.identify(request) is None:
                raise security.Refused(401, "not logged in")
            await self._checked_form(request, MAX_LOGIN_BYTES)
        except security.Refused as err:
            return refused(err)
        self.access.sessions.close(request.cookies.get(security.SESSION_COOKIE))
        root = request.scope.get("root_path", "")
        response = RedirectResponse(f"{root}/login", status_code=303)
        response.delete_cookie(
            security.SESSION_COOKIE,
            path=root or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response
