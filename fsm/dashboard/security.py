"""Who may act: the operator token, CSRF tokens, and the checks on action input.

- Reading is open to whoever reaches the dashboard (bind it where operators are).
- Actions are refused in read-only mode. Otherwise they need the operator token
  (a login form turns it into an HttpOnly, SameSite=Strict cookie holding an
  HMAC of it, never the token itself; scripts may send `Authorization: Bearer`),
  unless the app was built with `trust_local` (the CLI sets it only when bound to
  a loopback address and no token is given).
- Every form that changes something carries a CSRF token equal to a random
  SameSite=Strict cookie (double submit), and a request whose Origin names
  another site is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

import attrs

from ..errors import BadInput

CSRF_COOKIE = "jobfsm_csrf"
AUTH_COOKIE = "jobfsm_auth"
#: longest actor name and reason accepted (both go into the audit trail)
MAX_ACTOR = 200
MAX_REASON = 2000
#: most fresh attempts one requeue may grant from the dashboard
MAX_REQUEUE_ATTEMPTS = 1000


@attrs.frozen
class Access:
    """The dashboard's access settings (see the module docstring)."""

    read_only: bool = False
    token: str | None = None
    trust_local: bool = False
    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)

    @property
    def actions_enabled(self) -> bool:
        return not self.read_only and (self.token is not None or self.trust_local)

    @property
    def why_disabled(self) -> str | None:
        if self.read_only:
            return "read-only mode"
        if not self.actions_enabled:
            return "actions need an operator token (start the dashboard with --token)"
        return None

    def auth_value(self) -> str:
        """The login cookie's value: an HMAC of the token under this app's secret."""
        assert self.token is not None
        return hmac.new(self.secret, self.token.encode("utf-8"), hashlib.sha256).hexdigest()

    def token_matches(self, given: str | None) -> bool:
        if self.token is None or not given:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def authorized(self, cookie: str | None, header: str | None) -> bool:
        """Whether a request may act (actions enabled is checked apart)."""
        if self.token is None:
            return self.trust_local
        if header and header.startswith("Bearer ") and self.token_matches(header[7:]):
            return True
        return bool(cookie) and hmac.compare_digest(str(cookie), self.auth_value())


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def csrf_ok(cookie: str | None, field: str | None) -> bool:
    return bool(cookie) and bool(field) and hmac.compare_digest(str(cookie), str(field))


def same_origin(origin: str | None, host: str | None) -> bool:
    """No Origin header (older clients, curl) passes; one naming another host fails."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return urlsplit(origin).netloc == host


def text_field(what: str, value: object, limit: int) -> str:
    """A required, printable, bounded form field (actor, reason)."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{what} is required")
    text = value.strip()
    if len(text) > limit:
        raise BadInput(f"{what} must be at most {limit} characters, got {len(text)}")
    if not all(c.isprintable() or c in "\n\t" for c in text):
        raise BadInput(f"{what} must be printable text")
    return text


def attempts_field(value: object) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise BadInput(f"attempts must be a whole number, got {str(value)[:40]!r}") from None
    if not 1 <= n <= MAX_REQUEUE_ATTEMPTS:
        raise BadInput(f"attempts must be 1 to {MAX_REQUEUE_ATTEMPTS}, got {n}")
    return n
