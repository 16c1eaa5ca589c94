"""The AMQP URL: the one place a RabbitMQ URL is checked, and what of it may be shown.

Redaction itself is `fsm.secrets` (the one redactor of every adapter): this module only
tells it which query options pika reads (their names may be shown) and which values are
plain numbers (shown too); every other name and value, the user info's password and any
fragment show as `***`. `check_url` refuses what pika would misread, naming the problem
without the password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from fsm.errors import BadInput
from fsm.secrets import SECRET_NAME, query_pairs, redact_url, scrub, split_url, url_secrets

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
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def plain_option(name: str, value: str) -> bool:
    """A query option value safe to show: a number given to a known numeric option."""
    return name.lower() in PLAIN_OPTIONS and _NUMBER.fullmatch(value) is not None


def redact(url: object) -> str:
    """The URL fit for errors, logs and reprs (`fsm.secrets.redact_url` with pika's options)."""
    return redact_url(url, known=KNOWN_OPTIONS, plain=plain_option)


def url_scrub(text: str, url: str) -> str:
    """`text` (a driver's message) with every secret of `url` masked."""
    return scrub(text, url_secrets(url, known=KNOWN_OPTIONS, plain=plain_option))


def _parser_text(text: str, url: str) -> str:
    """pika's complaint about a URL up to its first quote, scrubbed: pika quotes what it
    could not read (repr-escaped at times, so no replacement could be sure to catch it)."""
    cut = min((i for i in (text.find("'"), text.find('"')) if i >= 0), default=len(text))
    head = url_scrub(text[:cut], url).rstrip(" :([")
    return f"{head} (value not shown)" if cut < len(text) else head


def check_url(url: object) -> str:
    """The URL with its scheme in lower case, or BadInput that never shows the password."""
    if not isinstance(url, str):
        raise BadInput(f"RabbitMQ url must be a string, got {type(url).__name__}")
    parts = split_url(url)
    if parts is None:
        raise BadInput(
            "RabbitMQ url must look like amqp://user:password@host:5672/vhost "
            "(got a value without 'scheme://')"
        )
    shown = redact(url)
    if parts.scheme.lower() not in SCHEMES:
        raise BadInput(f"RabbitMQ url {shown} must use amqp:// or amqps://")
    url = f"{parts.scheme.lower()}{url[len(parts.scheme) :]}"
    userinfo = parts.userinfo
    if userinfo is not None and _BAD_ESCAPE.search(userinfo):
        raise BadInput(
            f"RabbitMQ url {shown}: the user name or password has a malformed percent-escape "
            "('%' must be followed by two hex digits; write a literal % as %25)"
        )
    for name, _eq, _value in query_pairs(parts.query or ""):
        if SECRET_NAME.search(unquote(name)):
            raise BadInput(  # the option's name is not shown: it may be a cut password
                f"RabbitMQ url {shown}: a query option that looks like a password "
                "(?password=...) is not supported; put the password in the user info "
                "(amqp://user:password@host/)"
            )
    if userinfo is not None and ":" not in userinfo:
        raise BadInput(f"RabbitMQ url {shown}: a user name needs a password (user:password@)")
    try:
        pika.URLParameters(url)
    except Exception as err:  # pika raises ValueError, TypeError, ... for bad parts
        complaint = _parser_text(str(err), url)
        raise BadInput(f"RabbitMQ url {shown} is not valid: {complaint}") from None
    return url
