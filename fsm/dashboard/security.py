"""The checks every request passes, in the order they run, and the action input rules.

1. `Guard` (an ASGI middleware around the whole app), before any route runs: the
   `Host` header must name an allowed host (a page of another site reached through
   a rebinding DNS name carries that name, and is refused), and a declared body
   over MAX_BODY bytes is refused (413) unread.
2. Everything but the log-in page and static files needs an authenticated operator
   (`public_read` opens the pages and /metrics to anyone, never actions).
3. A request that changes something (log-in, log-out, an action) is checked in this
   order before its body is read: its `Origin` (and `Sec-Fetch-Site`) must be this
   dashboard's, read-only mode refuses actions, the operator must be authenticated;
   only then is the body read, streamed and capped at MAX_FORM_BYTES, and only an
   `application/x-www-form-urlencoded` body is parsed (multipart, which would spool
   uploads to disk, is refused). Its CSRF token is then compared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..errors import BadInput
from ..inputs import MAX_OPERATOR_TEXT, check_operator_text

CSRF_COOKIE = "jobfsm_csrf"
SESSION_COOKIE = "jobfsm_session"
#: the hosts a dashboard answers to unless told others (`--allowed-host`)
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
#: the allow-list entry that turns the Host check off (the application checks hosts)
ANY_HOST = "*"
#: largest request body accepted at all, and largest form read
MAX_BODY = 16 * 1024
MAX_FORM_BYTES = 16 * 1024
#: most fields a form may hold
MAX_FORM_FIELDS = 16
#: longest reason accepted: the engine's bound, one rule for the CLI and the dashboard
MAX_REASON = MAX_OPERATOR_TEXT
#: most fresh attempts one requeue may grant from the dashboard
MAX_REQUEUE_ATTEMPTS = 1000
FORM_TYPE = "application/x-www-form-urlencoded"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


class Refused(Exception):
    """A request refused by a check: `status` and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def host_name(host_header: str | None) -> str:
    """The host of a `Host` header without its port, lower case (`[::1]:80` -> `::1`)."""
    host = (host_header or "").strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def allowed_hosts(hosts: Iterable[str] | None) -> frozenset[str]:
    """The allow-list as compared: DEFAULT_HOSTS when none is given."""
    names = frozenset(host_name(h) if h != ANY_HOST else h for h in (hosts or DEFAULT_HOSTS))
    if not names or "" in names:
        raise BadInput("an allowed host must be a host name or address (or '*')")
    return names


def host_ok(host_header: str | None, allowed: frozenset[str]) -> bool:
    return ANY_HOST in allowed or host_name(host_header) in allowed


def same_origin(headers: Any, allowed: frozenset[str]) -> bool:
    """Whether a request that changes something comes from this dashboard's own pages.

    A browser names the page's site in `Origin` and says `Sec-Fetch-Site`; both must
    be this dashboard (same host and port as the request's `Host`, an allowed host).
    A client that sends neither (curl, scripts) passes this check: it still needs an
    operator's token or session, which a browser page of another site cannot get.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    netloc = urlsplit(origin).netloc.lower()
    return netloc == (headers.get("host") or "").lower() and host_ok(netloc, allowed)


async def read_form(request: Any, limit: int = MAX_FORM_BYTES) -> dict[str, str]:
    """The request's urlencoded form, read in chunks and refused past `limit` bytes
    (nothing is spooled to disk); a field named twice keeps its first value."""
    fields = await read_fields(request, limit)
    return {k: v[0] for k, v in fields.items()}


async def read_fields(
    request: Any, limit: int = MAX_FORM_BYTES, max_fields: int = MAX_FORM_FIELDS
) -> dict[str, list[str]]:
    """`read_form` keeping every value of a field named more than once (a set of ticked
    boxes), with at most `max_fields` fields in all."""
    ctype = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if ctype != FORM_TYPE:
        raise Refused(415, f"send the form as {FORM_TYPE}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, f"a form is at most {limit} bytes")
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=max_fields)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "the form is not UTF-8 urlencoded text of a few fields") from None


def reason_field(value: object) -> str:
    """The reason of an action: the engine's rule (1-1000 printable characters)."""
    return check_operator_text("the action", "reason", value)


def attempts_field(value: object) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise BadInput(f"attempts must be a whole number, got {str(value)[:40]!r}") from None
    if not 1 <= n <= MAX_REQUEUE_ATTEMPTS:
        raise BadInput(f"attempts must be 1 to {MAX_REQUEUE_ATTEMPTS}, got {n}")
    return n


def safe_next(target: str | None) -> str:
    """A path inside this dashboard to go back to after logging in ('' if not one)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return ""
    if any(c in target for c in "\r\n") or len(target) > 2000:
        return ""
    return target


class Guard:
    """ASGI middleware: the Host allow-list and the declared body size, before routing."""

    def __init__(self, app: Any, hosts: frozenset[str], max_body: int = MAX_BODY) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not host_ok(headers.get("host"), self.hosts):
            await _plain(send, 400, "this dashboard does not answer to that host name")
            return
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit() or not declared.isascii():
                await _plain(send, 400, "Content-Length must be a number of bytes")
                return
            if int(declared) > self.max_body:
                await _plain(send, 413, f"a request body is at most {self.max_body} bytes")
                return
        await self.app(scope, receive, send)


async def _plain(send: Any, status: int, text: str) -> None:
    body = text.encode("utf-8")
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
    headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
