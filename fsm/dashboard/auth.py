"""Who is at the dashboard: named operator tokens, sessions, and the login rate limit.

- **Tokens.** Each operator has a name and a token of at least MIN_TOKEN_CHARS
  characters (MIN_DISTINCT_CHARS of them different: a random token, not a word).
  Only SHA-256 digests of tokens are kept. `parse_tokens` reads them from a file or
  an environment variable (`NAME:TOKEN` or a bare `TOKEN`, named `operator`).
- **Sessions.** A login opens a session: a random id (32 bytes) in an HttpOnly,
  SameSite=Strict cookie (`Secure` over TLS), valid for `ttl` seconds from the
  login, closed by logout. Sessions live in the dashboard process: a restart logs
  everyone out. At most MAX_SESSIONS are kept (the oldest goes first).
- **Login rate limit.** At most `per_client` failed logins per client address and
  `total` failed logins over all addresses in any `window` seconds; past either, a
  login is refused (429) before the token is even compared.
- **An application's own user.** Mounted inside an application, the dashboard can
  take the operator from the application instead (`Authenticator`: the request ->
  the operator's name, or None); `app_user` reads Starlette's `request.user`.

Whoever is authenticated is the actor of every action in the audit trail.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from ..errors import BadInput

#: shortest token accepted, and how many different characters it must hold
MIN_TOKEN_CHARS = 16
MIN_DISTINCT_CHARS = 8
#: longest token accepted (a token is compared hashed; this bounds the hashing)
MAX_TOKEN_CHARS = 256
#: the name of a token given without one
DEFAULT_OPERATOR = "operator"
#: an operator's name: it becomes the actor of the audit trail
OPERATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}")
#: most named tokens one dashboard accepts
MAX_TOKENS = 1000
#: seconds a session lasts from its login
SESSION_TTL = 8 * 3600.0
#: most sessions kept at once (a login past it ends the oldest)
MAX_SESSIONS = 10_000
#: failed logins allowed per client address, and over all addresses, per window
LOGIN_FAILURES_PER_CLIENT = 10
LOGIN_FAILURES_TOTAL = 100
LOGIN_WINDOW = 60.0
#: most client addresses the rate limit remembers at once
MAX_CLIENTS = 10_000


def new_token() -> str:
    """A fresh random token (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def check_token(name: str, token: str) -> None:
    """Refuse a token too short, too plain, or holding spaces or control characters."""
    if not OPERATOR_NAME.fullmatch(name):
        raise BadInput(
            f"operator name {name[:40]!r} must be 1-64 letters, digits or _.@+- "
            "(starting with a letter or digit)"
        )
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
        raise BadInput(
            f"the token of operator {name!r} must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} "
            f"characters, got {len(token)} (make one: python -c "
            "'import secrets; print(secrets.token_urlsafe(24))')"
        )
    if len(set(token)) < MIN_DISTINCT_CHARS:
        raise BadInput(
            f"the token of operator {name!r} has fewer than {MIN_DISTINCT_CHARS} different "
            "characters: use a random token"
        )
    if not token.isprintable() or any(c.isspace() for c in token):
        raise BadInput(f"the token of operator {name!r} must be printable, without spaces")


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """Operator name -> token from lines of `NAME:TOKEN` or a bare `TOKEN` (named
    `operator`); blank lines and `#` comments are skipped. `source` names where the
    text came from in errors (never the token itself)."""
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        if not sep or not OPERATOR_NAME.fullmatch(name):
            name, token = DEFAULT_OPERATOR, line
        try:
            check_token(name, token)
        except BadInput as err:
            raise BadInput(f"{source}, line {number}: {err}") from None
        if name in tokens:
            raise BadInput(f"{source}, line {number}: operator {name!r} is named twice")
        tokens[name] = token
        if len(tokens) > MAX_TOKENS:
            raise BadInput(f"{source}: more than {MAX_TOKENS} tokens")
    if not tokens:
        raise BadInput(f"{source}: no token in it")
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Tokens:
    """Named operator tokens, kept as digests: `who(token)` is the operator's name."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise BadInput("the dashboard needs at least one operator token")
        for name, token in tokens.items():
            check_token(name, token)
        digests = {_digest(t) for t in tokens.values()}
        if len(digests) != len(tokens):
            raise BadInput("two operators have the same token: give each its own")
        self._by_digest = {_digest(t): name for name, t in tokens.items()}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_digest.values()))

    def who(self, given: str | None) -> str | None:
        """The operator whose token `given` is, or None (compared in constant time per
        token: every digest is compared, whichever matches)."""
        if not given or len(given) > MAX_TOKEN_CHARS:
            return None
        digest = _digest(given)
        found = None
        for known, name in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                found = name
        return found


class Authenticator(Protocol):
    """The operator a request comes from, as the embedding application knows it."""

    def __call__(self, request: Any) -> str | None: ...


def app_user(request: Any) -> str | None:
    """The application's authenticated user (Starlette's `AuthenticationMiddleware` sets
    `request.user`), by display name, or None: an `Authenticator` for mounting."""
    user = request.scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    name = str(getattr(user, "display_name", "") or "")
    return name if OPERATOR_NAME.fullmatch(name) else None


@attrs.frozen
class Session:
    operator: str
    expires: float


class Sessions:
    """Logged-in sessions by random id (see the module docstring); thread-safe."""

    def __init__(
        self,
        ttl: float = SESSION_TTL,
        *,
        limit: int = MAX_SESSIONS,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 60.0 <= ttl <= 30 * 86400.0:
            raise BadInput(f"a session lasts 60 s to 30 days, got {ttl!r}")
        self.ttl = ttl
        self._limit = limit
        self._now = now
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._secret = secrets.token_bytes(32)

    def open(self, operator: str) -> str:
        """A new session for `operator`; returns its id (the cookie's value)."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = Session(operator, self._now() + self.ttl)
            while len(self._sessions) > self._limit:
                self._sessions.popitem(last=False)
        return sid

    def operator(self, sid: str | None) -> str | None:
        """Who session `sid` belongs to, or None (unknown, expired or closed)."""
        if not sid:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if session.expires <= self._now():
                del self._sessions[sid]
                return None
            return session.operator

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)

    def csrf(self, subject: str) -> str:
        """The CSRF token of a session id or an application user: an HMAC under this
        process's secret, which no other site can read or compute."""
        return hmac.new(self._secret, subject.encode("utf-8"), hashlib.sha256).hexdigest()


class LoginLimiter:
    """Failed logins per client address and in all, over a sliding window."""

    def __init__(
        self,
        per_client: int = LOGIN_FAILURES_PER_CLIENT,
        total: int = LOGIN_FAILURES_TOTAL,
        window: float = LOGIN_WINDOW,
        *,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.total = total
        self.window = window
        self._now = now
        self._lock = threading.Lock()
        self._all: deque[float] = deque()
        self._by_client: OrderedDict[str, deque[float]] = OrderedDict()

    def _trim(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window:
            times.popleft()

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try again (0: it may try now)."""
        now = self._now()
        with self._lock:
            self._trim(self._all, now)
            waits = []
            if len(self._all) >= self.total:
                waits.append(self._all[0] + self.window - now)
            mine = self._by_client.get(client)
            if mine is not None:
                self._trim(mine, now)
                if len(mine) >= self.per_client:
                    waits.append(mine[0] + self.window - now)
            return max(waits, default=0.0)

    def failed(self, client: str) -> None:
        now = self._now()
        with self._lock:
            self._all.append(now)
            while len(self._all) > self.total:
                self._all.popleft()
            mine = self._by_client.pop(client, None) or deque()
            mine.append(now)
            while len(mine) > self.per_client:
                mine.popleft()
            self._by_client[client] = mine
            while len(self._by_client) > MAX_CLIENTS:
                self._by_client.popitem(last=False)
