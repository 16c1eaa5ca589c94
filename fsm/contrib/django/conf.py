"""The `JOBFSM = {...}` setting, read and checked: one frozen `Config`.

Every key is optional:

| key | default | meaning |
|---|---|---|
| `DATABASE` | `"default"` | the alias of `DATABASES` whose connection `submit` joins |
| `STORE` | derived from that alias | the store URL (`postgresql://...`, `sqlite:///...`) |
| `HANDLERS` | none | `module:obj`, the worker's `--app` (`manage.py jobfsm_worker`) |
| `KINDS` | `{}` | kind -> `KindPolicy` (or a dict of its fields) for submits here |
| `STRICT_KINDS` | `False` | refuse a submit of a kind not in `KINDS` |
| `WORKER_ARGS` | `[]` | more `jobfsm worker` options, before the command line's own |
| `DASHBOARD_URL` | none | where the jobfsm dashboard runs; the staff page links to it |
| `CHILD_ENV` | `[]` | variables the settings read, kept by process-executor children |

The store URL is derived from the connection's own settings (`settings_dict`, which
Django's test runner points at the test database), so the store and the connection
are one database, as a transactional submit needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ...inputs import KindPolicy

#: the keys `JOBFSM` may hold (any other is refused by name: a typo must not pass)
KEYS = frozenset(
    {
        "DATABASE",
        "STORE",
        "HANDLERS",
        "KINDS",
        "STRICT_KINDS",
        "WORKER_ARGS",
        "DASHBOARD_URL",
        "CHILD_ENV",
    }
)
#: the values of a store URL's `?migrate=` that turn migration on open off
FALSE = ("false", "0", "no")
#: Django backends a store URL can be derived from -> the store's scheme
POSTGRES_BACKEND = "django.db.backends.postgresql"
SQLITE_BACKEND = "django.db.backends.sqlite3"


@attrs.frozen
class Config:
    """`settings.JOBFSM`, checked."""

    database: str = "default"
    store: str = ""
    handlers: str | None = None
    kinds: Mapping[str, KindPolicy] = attrs.field(factory=dict)
    strict_kinds: bool = False
    worker_args: tuple[str, ...] = ()
    dashboard_url: str | None = None
    child_env: tuple[str, ...] = ()


def config() -> Config:
    """`settings.JOBFSM` as a `Config` (ImproperlyConfigured naming what is wrong)."""
    raw = getattr(settings, "JOBFSM", {})
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"JOBFSM must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"JOBFSM: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(KEYS))}"
        )
    database = _text(raw, "DATABASE") or "default"
    if database not in connections:
        raise ImproperlyConfigured(
            f"JOBFSM['DATABASE']: no database alias {database!r} in DATABASES"
        )
    handlers = _text(raw, "HANDLERS")
    dashboard = _text(raw, "DASHBOARD_URL")
    strict = raw.get("STRICT_KINDS", False)
    if not isinstance(strict, bool):
        raise ImproperlyConfigured("JOBFSM['STRICT_KINDS'] must be True or False")
    args = _strings(raw, "WORKER_ARGS")
    child_env = _strings(raw, "CHILD_ENV")
    return Config(
        database=database,
        store=_text(raw, "STORE") or store_url_of(database),
        handlers=handlers,
        kinds=_kinds(raw.get("KINDS", {})),
        strict_kinds=strict,
        worker_args=args,
        dashboard_url=dashboard,
        child_env=child_env,
    )


def store_url_of(alias: str) -> str:
    """The store URL of the database `alias` names, from its connection's settings."""
    return database_store_url(alias, connections[alias].settings_dict)


def database_store_url(alias: str, params: Mapping[str, Any]) -> str:
    """The store URL of a database of DATABASES (`params`, the entry of `alias`)."""
    backend = params.get("ENGINE", "")
    if in_memory(params):
        raise ImproperlyConfigured(
            f"JOBFSM: database {alias!r} is SQLite in memory (or a URI): a worker process "
            "could not reach it; use a file, or set JOBFSM['STORE']. Under Django's test "
            "runner, whose SQLite test database is in memory by default, name a file in "
            f"DATABASES[{alias!r}]['TEST']['NAME']"
        )
    if backend == SQLITE_BACKEND:
        return f"sqlite:///{Path(str(params['NAME'])).resolve()}"
    if backend == POSTGRES_BACKEND:
        user = quote(str(params.get("USER") or ""), safe="")
        password = quote(str(params.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = str(params.get("HOST") or "")
        port = str(params.get("PORT") or "")
        where = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        return f"postgresql://{auth}{where}/{quote(str(params['NAME']), safe='')}"
    raise ImproperlyConfigured(
        f"JOBFSM: database {alias!r} uses {backend!r}; jobfsm stores are PostgreSQL "
        f"({POSTGRES_BACKEND}, with psycopg 3) and SQLite ({SQLITE_BACKEND})"
    )


def in_memory(params: Mapping[str, Any]) -> bool:
    """Whether a database of DATABASES (`params`) is SQLite in memory, or named by a URI
    (as Django names an in-memory test database): no store can be derived from it."""
    if params.get("ENGINE", "") != SQLITE_BACKEND:
        return False
    name = str(params.get("NAME") or "")
    return not name or name == ":memory:" or name.startswith("file:")


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ImproperlyConfigured(f"JOBFSM[{key!r}] must be a non-empty string")
    return value


def _strings(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, ())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ImproperlyConfigured(f"JOBFSM[{key!r}] must be a list of strings")
    return tuple(value)


def _kinds(raw: Any) -> dict[str, KindPolicy]:
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured("JOBFSM['KINDS'] must be a dict of kind -> policy")
    out = {}
    for kind, policy in raw.items():
        if isinstance(policy, KindPolicy):
            out[kind] = policy
            continue
        if not isinstance(policy, Mapping):
            raise ImproperlyConfigured(
                f"JOBFSM['KINDS'][{kind!r}] must be a KindPolicy or a dict of its fields"
            )
        try:
            out[kind] = KindPolicy(**policy)
        except (TypeError, ValueError) as err:  # BadInput is a ValueError
            raise ImproperlyConfigured(f"JOBFSM['KINDS'][{kind!r}]: {err}") from err
    return out
