"""jobfsm in a Django project (docs/django.md): add `"fsm.contrib.django"` to
INSTALLED_APPS, set `JOBFSM = {...}` (`fsm.contrib.django.conf`), and submit jobs on
Django's own connection inside `transaction.atomic()`:

    from django.db import transaction
    from fsm.contrib.django import submit

    with transaction.atomic():
        order = Order.objects.create(total=total)
        submit("order.confirm", {"order": order.pk})
    # committed: the order and its job. Rolled back: neither.

`manage.py jobfsm_worker` runs `jobfsm worker` with the project's settings, and
`manage.py jobfsm_migrate` runs `jobfsm migrate` on the project's store.

Reading order: `conf` (the setting), this module (the engine of this process and
submit), `views` and `urls` (a staff page), `management.commands`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import MissingExtra

try:
    from django.core.signals import setting_changed
    from django.db import connections, transaction
except ModuleNotFoundError as err:  # pragma: no cover - exercised without Django only
    raise MissingExtra(f"the Django integration (it needs {err.name})", "django") from err

from ...records import Job
from ...registry import open_store
from ...service.engine import Engine
from .conf import Config, config

__all__ = ["close_engine", "config", "get_engine", "setup_child", "submit", "submit_many"]

_lock = threading.Lock()
_current: tuple[Config, Engine] | None = None


def get_engine() -> Engine:
    """This process's Engine over the store of `settings.JOBFSM`, opened at first use.

    Reopened when the setting resolves differently (an `override_settings`, or the test
    runner pointing the connection at the test database): the engine always speaks to
    the database the connection does."""
    global _current
    wanted = config()
    with _lock:
        if _current is not None and _current[0] == wanted:
            return _current[1]
        if _current is not None:
            _current[1].store.close()
            _current = None
        engine = Engine(
            open_store(wanted.store), kinds=wanted.kinds, strict_kinds=wanted.strict_kinds
        )
        _current = (wanted, engine)
        return engine


def close_engine() -> None:
    """Close this process's engine (its store's connections); the next use opens one.
    A test that drops its database closes it first."""
    global _current
    with _lock:
        if _current is not None:
            _current[1].store.close()
            _current = None


def submit(kind: str, payload: Any = None, *, using: str | None = None, **opts: Any) -> Job:
    """Submit one job on the Django connection `using` (default `JOBFSM['DATABASE']`), in
    its transaction: inside `transaction.atomic()` the job commits and rolls back with
    the block; outside one it is committed at once, in a block of its own.

    `opts` are `Engine.submit`'s (idempotency_key, queue, priority, run_after, ...)."""
    return submit_many([(kind, payload, opts)], using=using)[0]


def submit_many(
    items: Iterable[tuple[str, Any, Mapping[str, Any]]], *, using: str | None = None
) -> list[Job]:
    """`submit` for many jobs (kind, payload, options), validated before any is written."""
    engine = get_engine()
    alias = using or config().database
    conn = connections[alias]
    if conn.in_atomic_block:
        return engine.submit_many(items, conn=conn)
    with transaction.atomic(using=alias):
        return engine.submit_many(items, conn=conn)


def setup_child() -> None:
    """A worker's `child_init` hook: set Django up in a process executor's child (a fresh
    process) before it imports a handler. `manage.py jobfsm_worker` declares it on the
    handlers when they declare no child_init of their own (docs/django.md); nothing to
    do where Django is set up already."""
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def _settings_changed(*, setting: str, **_: Any) -> None:
    if setting in ("JOBFSM", "DATABASES"):
        close_engine()


setting_changed.connect(_settings_changed, dispatch_uid="jobfsm-settings-changed")
