"""`manage.py jobfsm_migrate`: `jobfsm migrate` on the store of `settings.JOBFSM`
(creates or upgrades the jobfsm tables in the project's database)."""

from __future__ import annotations

from ...conf import config
from ..run import DjangoCommand
from ..run import migrate as migrate_command


class Command(DjangoCommand):
    help = "Create or upgrade the jobfsm schema in the store of JOBFSM (`jobfsm migrate`)."
    command = migrate_command

    def arguments(self, given: list[str]) -> list[str]:
        return given or [config().store]
