"""Parse `sqlite://` store URLs into a path and connection options."""

from __future__ import annotations

import contextlib
from urllib.parse import parse_qsl, urlsplit

import attrs

from fsm.errors import BadStoreURL
from fsm.secrets import redact_url

DEFAULT_PATH = "jobfsm.db"
#: FULL: a commit is on disk before it returns (the job record is the source of truth).
#: NORMAL: faster in WAL mode, but a power loss may drop the last commits.
#: EXTRA: FULL plus a sync of the directory after the journal is deleted.
SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
DEFAULT_BUSY_TIMEOUT_MS = 5000
#: upper bound of the busy timeout: ten minutes of waiting for the write lock.
MAX_BUSY_TIMEOUT_MS = 600_000
_OPTIONS = ("synchronous", "busy_timeout_ms")


@attrs.frozen
class SqliteOptions:
    path: str
    synchronous: str = "FULL"
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS


def parse_url(url: str) -> SqliteOptions:
    """`sqlite:///rel.db`, `sqlite:////abs/path.db` or `sqlite://` (./jobfsm.db).

    Options: `?synchronous=FULL|NORMAL|EXTRA` (default FULL) and
    `busy_timeout_ms=N` (1..600000, default 5000). Anything else is a BadStoreURL.
    """
    if not isinstance(url, str):
        raise BadStoreURL(f"a SQLite store URL must be a string, got {type(url).__name__}")
    shown = redact_url(url)  # messages show this: a password never appears in one
    if "://" not in url:
        raise BadStoreURL(f"not a SQLite store URL (expected sqlite:///path.db): {shown!r}")
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise BadStoreURL(f"not a SQLite store URL (scheme must be 'sqlite'): {shown!r}")
    if parts.netloc:
        raise BadStoreURL(
            f"a SQLite store URL has no host: use sqlite:///relative.db or "
            f"sqlite:////absolute/path.db, got {shown!r}"
        )
    if parts.fragment:
        raise BadStoreURL(f"a SQLite store URL has no #fragment, got {shown!r}")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        path = DEFAULT_PATH
    if path == ":memory:" or path.startswith("file:"):
        raise BadStoreURL(
            f"SQLite store URL {shown!r}: an in-memory or URI database cannot be shared "
            "between threads and processes; use memory:// or a file path"
        )
    if path.endswith("/"):
        raise BadStoreURL(f"SQLite store URL {shown!r} names a directory, not a database file")
    pairs: list[tuple[str, str]] | None = None
    # raised below, outside the handler: the parser's text quotes the query (a password?)
    with contextlib.suppress(ValueError):
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    if pairs is None:
        raise BadStoreURL(f"SQLite store URL {shown!r}: malformed query string")
    seen: dict[str, str] = {}
    for key, value in pairs:
        if key not in _OPTIONS:
            raise BadStoreURL(
                f"SQLite store URL {shown!r}: unknown option {key!r}; known: {', '.join(_OPTIONS)}"
            )
        if key in seen:
            raise BadStoreURL(f"SQLite store URL {shown!r}: option {key!r} given twice")
        seen[key] = value
    synchronous = seen.get("synchronous", "FULL").upper()
    if synchronous not in SYNCHRONOUS:
        raise BadStoreURL(
            f"SQLite store URL {shown!r}: synchronous must be one of {', '.join(SYNCHRONOUS)}, "
            f"got {seen['synchronous']!r}"
        )
    raw_timeout = seen.get("busy_timeout_ms", str(DEFAULT_BUSY_TIMEOUT_MS))
    if not raw_timeout.isdigit() or not 1 <= int(raw_timeout) <= MAX_BUSY_TIMEOUT_MS:
        raise BadStoreURL(
            f"SQLite store URL {shown!r}: busy_timeout_ms must be an integer from 1 to "
            f"{MAX_BUSY_TIMEOUT_MS}, got {raw_timeout!r}"
        )
    return SqliteOptions(path=path, synchronous=synchronous, busy_timeout_ms=int(raw_timeout))
