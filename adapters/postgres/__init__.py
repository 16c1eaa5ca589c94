"""The PostgreSQL store (`postgresql://` and `postgres://` URLs).

Importing this package imports psycopg; without it the import fails with
ModuleNotFoundError, which fsm.registry turns into MissingExtra naming
`pip install 'jobfsm[postgres]'`.

URL: `postgresql://user:password@host:port/dbname?option=value&...`. jobfsm reads
`schema` (default `public`), `pool_min` (1), `pool_max` (10, at most 100),
`pool_timeout` (10 s to wait for a pooled connection) and `migrate` (true);
every other option is passed to libpq (`sslmode`, `connect_timeout` (default 5),
`application_name`, ...).
"""

from __future__ import annotations

import psycopg  # noqa: F401  (fail at import time when the extra is missing)
import psycopg_pool  # noqa: F401

from ._schema import LATEST, MIGRATIONS
from ._url import Settings, parse
from .liveness import PostgresLiveness
from .store import PostgresStore


def open_store(url: str) -> PostgresStore:
    """Open (and, unless `?migrate=false`, migrate) the store a URL names."""
    settings = parse(url)
    store = PostgresStore(settings)
    try:
        if settings.migrate:
            store.migrate()
        else:
            store.check_schema()
        store.open()
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
