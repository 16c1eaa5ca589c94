"""Parse `postgresql://` store URLs: jobfsm's own options, the rest goes to libpq."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fsm.errors import BadStoreURL

#: a schema name: lower-case letters, digits and `_`, starting with a letter or `_`
#: (so it never needs case-folding rules and is safe to quote).
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

POOL_MAX_LIMIT = 100
#: options jobfsm reads itself; every other query parameter is a libpq parameter.
OPTIONS = ("schema", "pool_min", "pool_max", "pool_timeout", "migrate")

#: libpq defaults jobfsm sets unless the URL does: a bounded connect.
DEFAULT_CONNECT_TIMEOUT = 5


@attrs.frozen
class Settings:
    conninfo: str
    redacted: str
    schema: str = "public"
    pool_min: int = 1
    pool_max: int = 10
    pool_timeout: float = 10.0
    migrate: bool = True


def redact(url: str) -> str:
    """The URL with any password replaced by `***`, for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _int(name: str, text: str, low: int, high: int, url: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise BadStoreURL(f"store URL {url}: {name} must be an integer {low}..{high}, got {text!r}")
    return value


def parse(url: str) -> Settings:
    """Split a store URL into libpq conninfo and jobfsm options; BadStoreURL names the problem."""
    if not isinstance(url, str):
        raise BadStoreURL(f"a PostgreSQL store URL must be a string, got {url!r}")
    shown = redact(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise BadStoreURL(f"store URL {shown}: expected postgresql://..., got scheme {scheme!r}")
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as err:
        raise BadStoreURL(f"store URL {shown}: malformed query string ({err})") from err
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in query:
        if key in OPTIONS:
            if key in ours:
                raise BadStoreURL(f"store URL {shown}: option {key!r} is given twice")
            ours[key] = value
        else:
            rest.append((key, value))
    schema = ours.get("schema", "public")
    if not SCHEMA_NAME.match(schema):
        raise BadStoreURL(
            f"store URL {shown}: schema must be 1-63 lower-case letters, digits or '_' "
            f"not starting with a digit; got {schema!r}"
        )
    pool_max = _int("pool_max", ours.get("pool_max", "10"), 1, POOL_MAX_LIMIT, shown)
    pool_min = _int("pool_min", ours.get("pool_min", "1"), 0, pool_max, shown)
    timeout_text = ours.get("pool_timeout", "10")
    try:
        pool_timeout = float(timeout_text)
    except ValueError:
        pool_timeout = -1.0
    if not 0 < pool_timeout <= 300:
        raise BadStoreURL(
            f"store URL {shown}: pool_timeout must be seconds in (0, 300], got {timeout_text!r}"
        )
    migrate_text = ours.get("migrate", "true").lower()
    if migrate_text not in ("true", "false", "1", "0", "yes", "no"):
        raise BadStoreURL(f"store URL {shown}: migrate must be true or false, got {migrate_text!r}")
    plain = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    try:
        params = conninfo_to_dict(plain)
    except psycopg.Error as err:
        raise BadStoreURL(f"store URL {shown}: {err}") from err
    extra = {} if "connect_timeout" in params else {"connect_timeout": DEFAULT_CONNECT_TIMEOUT}
    return Settings(
        conninfo=make_conninfo(plain, **extra),
        redacted=redact(plain),
        schema=schema,
        pool_min=pool_min,
        pool_max=pool_max,
        pool_timeout=pool_timeout,
        migrate=migrate_text in ("true", "1", "yes"),
    )
