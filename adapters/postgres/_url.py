"""Parse `postgresql://` store URLs: jobfsm's own options, the rest goes to libpq."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fsm.errors import BadStoreURL
from fsm.secrets import redact_url, scrub, url_secrets

#: PostgreSQL identifiers (and LISTEN channel names) hold at most NAMEDATALEN - 1 bytes
MAX_IDENTIFIER_BYTES = 63
#: the LISTEN/NOTIFY channel of a schema is CHANNEL_PREFIX + schema (adapters.postgres.listen)
CHANNEL_PREFIX = "jobfsm_"
#: the longest schema name whose channel name still fits: 63 - 7 = 56 characters
MAX_SCHEMA_LENGTH = MAX_IDENTIFIER_BYTES - len(CHANNEL_PREFIX)
#: a schema name: lower-case letters, digits and `_`, starting with a letter or `_`
#: (so it never needs case-folding rules and is safe to quote). Always `fullmatch`ed.
SCHEMA_NAME = re.compile(rf"[a-z_][a-z0-9_]{{0,{MAX_SCHEMA_LENGTH - 1}}}")

#: the pool bounds a URL may set: `pool_max` 1..POOL_MAX_LIMIT, `pool_min` 0..pool_max
POOL_MAX_LIMIT = 100
#: default `pool_max`: with the one dedicated connection of `wait`, a process that submits
#: and waits holds at most 3 (the budget table: adapters.postgres.budget)
DEFAULT_POOL_MAX = 2
#: default `pool_min`: 0, so a pool opens no connection before its first call (lazy)
DEFAULT_POOL_MIN = 0
#: options jobfsm reads itself; every other query parameter is a libpq parameter.
OPTIONS = ("schema", "pool_min", "pool_max", "pool_timeout", "migrate", "prepare")
#: how the boolean options may be written
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")

#: what each kind of connection is called in `pg_stat_activity.application_name` (libpq's
#: `fallback_application_name`: an `application_name` in the URL wins over all of them)
ROLES = {
    "pool": "jobfsm",  # the store's pools (blocking and asyncio): every store call
    "listen": "jobfsm-listen",  # a polling worker's LISTEN for new jobs
    "wait": "jobfsm-wait",  # LISTEN for final states, for `wait`
    "liveness": "jobfsm-liveness",  # a worker's session advisory lock
    "admin": "jobfsm-admin",  # migrations and checks at open, closed at once
}

#: libpq defaults jobfsm sets unless the URL does: a bounded connect.
DEFAULT_CONNECT_TIMEOUT = 5


@attrs.frozen
class Settings:
    """A parsed store URL. `conninfo` holds the password: it is left out of the repr,
    and `redacted` (the URL with passwords masked) is what messages show."""

    conninfo: str = attrs.field(repr=False)
    redacted: str
    schema: str = "public"
    pool_min: int = DEFAULT_POOL_MIN
    pool_max: int = DEFAULT_POOL_MAX
    pool_timeout: float = 10.0
    migrate: bool = True
    #: false: pooled connections never use server-side prepared statements (psycopg's
    #: `prepare_threshold=None`), as a transaction-pooling proxy without prepared-statement
    #: support (PgBouncer before 1.21) needs
    prepare: bool = True
    #: the password(s) of the URL, to mask in driver error texts (never shown)
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)

    def pool_options(self, name: str) -> dict[str, Any]:
        """The keyword arguments of the store's connection pool (blocking and asyncio
        alike): the URL's bounds, autocommit connections, opened by the caller."""
        return {
            "min_size": self.pool_min,
            "max_size": self.pool_max,
            "timeout": self.pool_timeout,
            "kwargs": {
                "autocommit": True,
                **self.role("pool"),
                **({} if self.prepare else {"prepare_threshold": None}),
            },
            "name": name,
            "open": False,
        }

    @staticmethod
    def role(role: str) -> dict[str, str]:
        """libpq's `fallback_application_name` for a connection of `role` (`ROLES`): what
        `pg_stat_activity` shows for it, unless the URL sets `application_name`."""
        return {"fallback_application_name": ROLES[role]}

    def scrub(self, text: str) -> str:
        """A driver's error text fit to show: the URL's passwords masked."""
        return scrub(text, self.secrets)


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
        raise BadStoreURL(f"a PostgreSQL store URL must be a string, got {type(url).__name__}")
    shown = redact_url(url)
    secrets = url_secrets(url)
    if "://" not in url:
        raise BadStoreURL(f"store URL {shown}: expected postgresql://user@host/dbname")
    parts = urlsplit(url)
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise BadStoreURL(f"store URL {shown}: expected postgresql://..., got scheme {scheme!r}")
    # errors are raised outside the `except`, so no driver text (which may quote the
    # password) is even chained as __context__
    query: list[tuple[str, str]] = []
    problem = ""
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as err:
        problem = f"malformed query string ({scrub(str(err), secrets)})"
    if problem:
        raise BadStoreURL(f"store URL {shown}: {problem}")
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
    if not SCHEMA_NAME.fullmatch(schema):
        raise BadStoreURL(
            f"store URL {shown}: schema must be 1-{MAX_SCHEMA_LENGTH} lower-case letters, "
            f"digits or '_' not starting with a digit (at most {MAX_SCHEMA_LENGTH} so that "
            f"its LISTEN channel {CHANNEL_PREFIX}<schema> fits PostgreSQL's "
            f"{MAX_IDENTIFIER_BYTES}-byte names); got {schema[:80]!r}"
            + (f" ({len(schema)} characters)" if len(schema) > MAX_SCHEMA_LENGTH else "")
        )
    pool_max = _int(
        "pool_max", ours.get("pool_max", str(DEFAULT_POOL_MAX)), 1, POOL_MAX_LIMIT, shown
    )
    pool_min = _int("pool_min", ours.get("pool_min", str(DEFAULT_POOL_MIN)), 0, pool_max, shown)
    timeout_text = ours.get("pool_timeout", "10")
    try:
        pool_timeout = float(timeout_text)
    except ValueError:
        pool_timeout = -1.0
    if not 0 < pool_timeout <= 300:
        raise BadStoreURL(
            f"store URL {shown}: pool_timeout must be seconds in (0, 300], got {timeout_text!r}"
        )
    flags = {name: ours.get(name, "true").lower() for name in ("migrate", "prepare")}
    for name, text in flags.items():
        if text not in TRUE + FALSE:
            raise BadStoreURL(f"store URL {shown}: {name} must be true or false, got {text!r}")
    # %20 for a space: libpq decodes percent escapes but not "+" (urlencode's default)
    encoded = urlencode(rest, quote_via=quote)
    plain = urlunsplit(("postgresql", parts.netloc, parts.path, encoded, ""))
    params: dict[str, Any] = {}
    try:
        params = conninfo_to_dict(plain)
    except psycopg.Error as err:
        problem = scrub(str(err), secrets)  # the driver quotes the token it could not parse
    if problem:
        raise BadStoreURL(f"store URL {shown}: {problem}")
    extra = {} if "connect_timeout" in params else {"connect_timeout": DEFAULT_CONNECT_TIMEOUT}
    return Settings(
        conninfo=make_conninfo(plain, **extra),
        redacted=redact_url(plain),
        schema=schema,
        pool_min=pool_min,
        pool_max=pool_max,
        pool_timeout=pool_timeout,
        migrate=flags["migrate"] in TRUE,
        prepare=flags["prepare"] in TRUE,
        secrets=secrets,
    )
