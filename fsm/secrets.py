"""Keep secrets out of error messages, logs and reprs: URLs shown with passwords masked.

Every adapter that puts a URL (or a driver's error text, which may quote one) into a
message passes it through here first. `redact_url` never fails and never returns a
password: a URL it cannot split (no `://`) is not shown at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"
#: query parameters that carry secrets (libpq's `password` and `sslpassword`, and
#: anything else named like a password, a secret or a token)
_SECRET_KEY = re.compile(r"pass|secret|token", re.IGNORECASE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


def _split(url: str) -> tuple[str, str, str, str] | None:
    """(scheme, netloc, path, query-and-fragment) without decoding anything."""
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1:
            end = min(end, at)
    netloc, tail = rest[:end], rest[end:]
    path, q, query = tail.partition("?")
    if not q:
        path, h, fragment = tail.partition("#")
        return scheme, netloc, path, f"#{fragment}" if h else ""
    return scheme, netloc, path, f"?{query}"


def redact_url(url: object) -> str:
    """`url` with the password of its user info and of `?password=` (and alike) masked.

    A value that is not a string, or has no `scheme://`, is not shown: only its
    scheme, if it has one (a URL typed without `://` may hold the password anywhere).
    """
    if not isinstance(url, str):
        return f"<a {type(url).__name__}, not a URL>"
    parts = _split(url)
    if parts is None:
        scheme = url.split(":", 1)[0]
        shown = scheme if _SCHEME.fullmatch(scheme) and ":" in url else "?"
        return f"<{shown}: URL without '://', not shown>"
    scheme, netloc, path, rest = parts
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}"
    if rest.startswith("?"):
        query, hash_, fragment = rest[1:].partition("#")
        pairs = []
        for pair in query.split("&"):
            key, eq, _value = pair.partition("=")
            pairs.append(f"{key}={MASK}" if eq and _SECRET_KEY.search(unquote(key)) else pair)
        rest = "?" + "&".join(pairs) + hash_ + fragment
    return f"{scheme}://{netloc}{path}{rest}"


def url_secrets(url: object) -> tuple[str, ...]:
    """Every form (raw and percent-decoded) of the passwords `url` holds, longest first."""
    if not isinstance(url, str):
        return ()
    found: set[str] = set()
    parts = _split(url)
    if parts is None:
        return ()
    _, netloc, _, rest = parts
    userinfo, at, _ = netloc.rpartition("@")
    if at and ":" in userinfo:
        found.add(userinfo.split(":", 1)[1])
    if rest.startswith("?"):
        for pair in rest[1:].split("#", 1)[0].split("&"):
            key, eq, value = pair.partition("=")
            if eq and _SECRET_KEY.search(unquote(key)):
                found.add(value)
    found |= {unquote(s) for s in found} | {unquote(s.replace("+", " ")) for s in found}
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of every secret masked (for a driver's error text)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
