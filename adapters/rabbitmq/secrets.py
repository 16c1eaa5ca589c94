"""Broker URLs without their secrets: the one place a RabbitMQ URL is checked and redacted.

A password may sit in the user info (`amqp://user:secret@host/`), in a query option
(`?ssl_options=...`, or a mistaken `?password=`) or in a fragment. `redact` replaces
each with `***`; `scrub` does the same to any text (a driver's error message) that might
quote one. Neither parses percent-escapes strictly, so a mistyped escape cannot make a
password slip through.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

from fsm.errors import BadInput

from ._pika import pika

SCHEMES = ("amqp", "amqps")
#: pika URL options whose numeric values are shown (all other values show as ***)
PLAIN_OPTIONS = frozenset(
    {
        "backpressure_detection",
        "blocked_connection_timeout",
        "channel_max",
        "connection_attempts",
        "frame_max",
        "heartbeat",
        "locale",
        "retry_delay",
        "socket_timeout",
        "stack_timeout",
        "tcp_options",
    }
)
#: every option pika reads from a URL: other names show as *** (a value holding an
#: unescaped `&` or `;` would otherwise show its tail as an option name)
KNOWN_OPTIONS = PLAIN_OPTIONS | {"client_properties", "ssl_options"}
_NUMBER = re.compile(r"[0-9.]{1,20}")
#: query options that look like a password: refused with a clear error
_SECRET_OPTION = re.compile(r"pass|secret|token|credential", re.IGNORECASE)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_MIN_SCRUBBED = 3  # shorter secrets would turn every message into asterisks


def _split(url: str) -> tuple[str, str, str, str, str, str] | None:
    """(scheme, userinfo, host_and_path, query, fragment, has_at) or None without `://`.

    The user info ends at the last `@` before any `?` or `#`: a password holding an
    unescaped `/` or `@` is still treated as secret (over-redacting a vhost is harmless).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    rest, _hash, fragment = rest.partition("#")
    rest, _q, query = rest.partition("?")
    userinfo, at, host_and_path = rest.rpartition("@")
    return scheme, userinfo, host_and_path, query, fragment, at


def _plain(key: str, value: str) -> bool:
    """A query option value safe to show: a number given to a known numeric option."""
    return unquote(key).lower() in PLAIN_OPTIONS and _NUMBER.fullmatch(value) is not None


def _pairs(query: str) -> list[tuple[str, str, str]]:
    out = []
    for part in re.split(r"[&;]", query):
        key, eq, value = part.partition("=")
        out.append((key, eq, value))
    return out


def redact(url: object) -> str:
    """The URL fit for errors, logs and reprs: password and non-plain option values -> ***."""
    if not isinstance(url, str):
        return f"<{type(url).__name__}, not a URL>"
    parts = _split(url)
    if parts is None:
        return "<not a URL: no '://'>"
    scheme, userinfo, host_and_path, query, fragment, at = parts
    user = ""
    if at:
        name, colon, _password = userinfo.partition(":")
        user = f"{name}:***@" if colon else f"{name}@"
    out = host_and_path
    if query:
        shown = [
            f"{key if unquote(key).lower() in KNOWN_OPTIONS else '***'}{eq}"
            f"{value if _plain(key, value) else '***'}"
            for key, eq, value in _pairs(query)
        ]
        out += "?" + "&".join(shown)
    if fragment:
        out += "#***"
    # scrubbed for what a malformed URL hides from the split above (not the user name,
    # which may equal the password)
    return f"{scheme}://{user}{scrub(out, url)}"


def _secrets(url: str) -> set[str]:
    parts = _split(url)
    if parts is None:
        return {url}
    _scheme, userinfo, _host, query, fragment, at = parts
    raw: list[str] = []
    if at and ":" in userinfo:
        raw.append(userinfo.partition(":")[2])
    # A password holding an unescaped `?` or `#` hides its `@` from the split above:
    # the user info then ends at the last `@` anywhere, and that reading is secret too.
    rest = url.partition("://")[2]
    if "@" in rest:
        loose = rest.rpartition("@")[0]
        if ":" in loose:
            raw.append(loose.partition(":")[2])
    raw += [v for k, _eq, v in _pairs(query) if not _plain(k, v)]
    raw += [k for k, _eq, _v in _pairs(query) if unquote(k).lower() not in KNOWN_OPTIONS]
    if fragment:
        raw.append(fragment)
    out: set[str] = set()
    for value in raw:
        # and the pieces a URL parser may cut a malformed password into
        for piece in [value, *re.split(r"[/?#:@&;=]", value)]:
            out.update({piece, unquote(piece), unquote_plus(piece)})
    return {s for s in out if len(s) >= _MIN_SCRUBBED}


def scrub(text: str, url: str) -> str:
    """`text` with every secret of `url` (raw or percent-decoded) replaced by ***."""
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _parser_text(text: str, url: str) -> str:
    """pika's complaint about a URL up to its first quote, scrubbed: pika quotes what it
    could not read (repr-escaped at times, so no replacement could be sure to catch it)."""
    cut = min((i for i in (text.find("'"), text.find('"')) if i >= 0), default=len(text))
    head = scrub(text[:cut], url).rstrip(" :([")
    return f"{head} (value not shown)" if cut < len(text) else head


def check_url(url: object) -> str:
    """The URL with its scheme in lower case, or BadInput that never shows the password."""
    if not isinstance(url, str):
        raise BadInput(f"RabbitMQ url must be a string, got {type(url).__name__}")
    parts = _split(url)
    if parts is None:
        raise BadInput(
            "RabbitMQ url must look like amqp://user:password@host:5672/vhost "
            "(got a value without '://')"
        )
    scheme, userinfo, _host, query, _fragment, at = parts
    shown = redact(url)
    if scheme.lower() not in SCHEMES:
        raise BadInput(f"RabbitMQ url {shown} must use amqp:// or amqps://")
    url = f"{scheme.lower()}{url[len(scheme) :]}"
    if at and _BAD_ESCAPE.search(userinfo):
        raise BadInput(
            f"RabbitMQ url {shown}: the user name or password has a malformed percent-escape "
            "('%' must be followed by two hex digits; write a literal % as %25)"
        )
    for key, _eq, _value in _pairs(query) if query else []:
        if _SECRET_OPTION.search(unquote(key)):
            raise BadInput(  # the option's name is not shown: it may be a cut password
                f"RabbitMQ url {shown}: a query option that looks like a password "
                "(?password=...) is not supported; put the password in the user info "
                "(amqp://user:password@host/)"
            )
    if at and ":" not in userinfo:
        raise BadInput(f"RabbitMQ url {shown}: a user name needs a password (user:password@)")
    try:
        pika.URLParameters(url)
    except Exception as err:  # pika raises ValueError, TypeError, ... for bad parts
        complaint = _parser_text(str(err), url)
        raise BadInput(f"RabbitMQ url {shown} is not valid: {complaint}") from None
    return url
