"""The PostgreSQL store (`postgresql://` and `postgres://` URLs).

Importing this package imports psycopg; without it the import fails with
ModuleNotFoundError, which fsm.registry turns into MissingExtra naming
`pip install 'jobfsm[postgres]'`.

URL: `postgresql://user:password@host:port/dbname?option=value&...`. jobfsm reads
`schema` (default `public`), `pool_min` (0: pools are lazy), `pool_max` (2, at most
100), `pool_timeout` (10 s to wait for a pooled connection), `migrate` (true) and
`prepare` (true; false for a transaction-pooling proxy); every other option is passed
to libpq (`sslmode`, `connect_timeout` (default 5), `application_name`, ...). What a
process holds in all: `budget`.
"""

from __future__ import annotations

import psycopg  # noqa: F401  (fail at import time when the extra is missing)
import psycopg_pool  # noqa: F401

from ._url import Settings, parse
from .liveness import PostgresLiveness
from .migrations import LATEST, MIGRATIONS
from .store import PostgresStore


def open_store(url: str) -> PostgresStore:
    """Open (and, unless `?migrate=false`, migrate) the store a URL names."""
    settings = parse(url)
    store = PostgresStore(settings)
    try:
        with store.connect() as conn:  # one admin connection: migrate or check, then open
            if settings.migrate:
                store.migrate(conn)
            else:
                store.check_schema(conn)
            store.open(conn)
    except BaseException:
        store.close()
        raise
    return store


__all__ = [
    "LATEST",
    "MIGRATIONS",
    "PostgresLiveness",
    "PostgresStore",
    "Settings",
    "open_store",
    "parse",
]
