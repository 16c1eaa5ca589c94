"""How a command reaches its store: an Engine over the store `--store` names, closed
after. Read-only commands open existing stores only, and create or migrate nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import BadInput, SchemaError
from ..registry import open_store, store_url
from ..service.engine import Engine
from ..text import printable


def check_store_exists(url: str) -> None:
    """Read-only commands open existing stores only: a SQLite URL naming no file is an error
    (opening it would create and migrate an empty database, and a typo would read as "no
    jobs"). Other stores are servers: a wrong address fails to connect on its own."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite" or parts.netloc:
        return  # not SQLite, or a URL the adapter refuses with its own message
    # the adapter's rule (adapters/sqlite/url.py): the path after "sqlite:///", else jobfsm.db
    path = (parts.path[1:] if parts.path.startswith("/") else parts.path) or "jobfsm.db"
    if not os.path.exists(path):
        raise BadInput(
            f"no SQLite store at {printable(os.path.abspath(path))!r}: read-only commands do not "
            "create stores; check --store or $JOBFSM_STORE (`jobfsm migrate URL` creates one)"
        )


def _without_migration(url: str) -> str:
    """A PostgreSQL URL opened for reading: `migrate=false` unless the URL says otherwise,
    so a mistyped schema is refused instead of created (and nothing is migrated)."""
    parts = urlsplit(url)
    if parts.scheme.lower().split("+", 1)[0] not in ("postgresql", "postgres"):
        return url
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "migrate" for key, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("migrate", "false")])))


@contextmanager
def engine_for(url: str | None, *, existing: bool = False) -> Iterator[Engine]:
    """An Engine over the store `url` names (see `fsm.registry.store_url`), closed after.

    `existing=True` (read-only commands): refuse a store that does not exist yet (a SQLite
    path naming no file, a PostgreSQL schema not at this jobfsm's version); create and
    migrate nothing."""
    target = store_url(url)
    if existing:
        check_store_exists(target)
        try:
            store = open_store(_without_migration(target))
        except SchemaError as err:
            raise BadInput(
                f"{err} (read-only commands neither create nor migrate a store: check "
                "--store or $JOBFSM_STORE, or run `jobfsm migrate URL`)"
            ) from err
    else:
        store = open_store(target)
    try:
        yield Engine(store)
    finally:
        store.close()
