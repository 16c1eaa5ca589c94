"""`manage.py jobfsm_worker [OPTIONS]`: `jobfsm worker`, with `--app` and `--store` from
`settings.JOBFSM` (HANDLERS, the store URL) and JOBFSM['WORKER_ARGS'] before the options
given here (given ones win). `manage.py jobfsm_worker --help` lists the options.

A process executor's children set Django up before their first job
(`run.prepare_children`)."""

from __future__ import annotations

from ..run import DjangoCommand, prepare_children, worker_args
from ..run import worker as worker_command


class Command(DjangoCommand):
    help = "Run a jobfsm worker (`jobfsm worker`) with this project's JOBFSM settings."
    command = worker_command

    def arguments(self, given: list[str]) -> list[str]:
        args = worker_args(given)
        prepare_children(args)
        return args
