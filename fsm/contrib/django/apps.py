"""The Django app `fsm.contrib.django` (label `jobfsm`): its management commands, the
staff page, and the store made ready by `manage.py migrate`. It defines no models: the
store's tables are jobfsm's own schema, created by the store itself.

`migrate` (which Django's test runner also runs when it creates a test database) sends
`post_migrate`, and `prepare_store` then opens this process's engine on the migrated
database when it is the one `JOBFSM` submits on: opening creates or upgrades jobfsm's
tables and, on SQLite, switches the file to WAL. Both need the write lock, which a
test's transaction holds once it has written: done at the first submit inside a
`TestCase` instead, they failed with `database is locked`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


class JobfsmConfig(AppConfig):
    name = "fsm.contrib.django"
    label = "jobfsm"
    verbose_name = "jobfsm"

    def ready(self) -> None:
        # sent to apps with a models module only: hence the app's empty models.py
        post_migrate.connect(prepare_store, sender=self, dispatch_uid="jobfsm-prepare-store")


def prepare_store(*, using: str, **_: Any) -> None:
    """`post_migrate`: open this process's engine (`get_engine`) when the migrated
    database `using` is the one `JOBFSM` submits on, which creates or upgrades
    jobfsm's tables there. Nothing is done for another alias, for SQLite in memory
    (it cannot be a store: the first submit refuses it by name), or for a store URL
    that says `?migrate=false` (its schema is migrated by `jobfsm_migrate`)."""
    from . import get_engine
    from .conf import FALSE, config, in_memory

    if in_memory(connections[using].settings_dict):
        return
    wanted = config()
    if using != wanted.database:
        return
    query = dict(parse_qsl(urlsplit(wanted.store).query))
    if query.get("migrate", "true").lower() in FALSE:
        return
    get_engine()
