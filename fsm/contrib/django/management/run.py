"""What the management commands share: a Django command that runs a `jobfsm` CLI command
(its options, help, errors and exit status are the CLI's own), and the worker's
arguments from `settings.JOBFSM`."""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar

import click
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ....cli.apps import load_app
from ....cli.root import run
from ....cli.store_cmd import migrate
from ....cli.worker_cmd import worker
from ....errors import JobFSMError
from ....worker.handlers import Handlers
from .. import setup_child
from ..conf import config

__all__ = ["DjangoCommand", "migrate", "prepare_children", "worker", "worker_args"]

#: the options manage.py itself reads before any command runs (both forms of each)
DJANGO_OPTIONS = ("--settings", "--pythonpath")
#: the variable naming what a process executor's children keep (adapters.child_env)
CHILD_ENV_VAR = "JOBFSM_CHILD_ENV"


class DjangoCommand(BaseCommand):
    """A management command whose options are a jobfsm CLI command's: `manage.py NAME
    ARGS` runs `command` with `arguments(ARGS)`."""

    command: ClassVar[click.Command]

    def arguments(self, given: list[str]) -> list[str]:
        return given

    def add_arguments(self, parser: CommandParser) -> None:  # call_command's positional args
        parser.add_argument("args", nargs="*", help="the jobfsm command's options")

    def run_from_argv(self, argv: list[str]) -> None:
        """manage.py's path: every option goes to the jobfsm command (so `--help` is its
        help), except manage.py's own --settings and --pythonpath, already applied."""
        try:
            args = self.run_args(without_django_options(argv[2:]))
        except CommandError as err:  # as BaseCommand.run_from_argv shows it
            self.stderr.write(f"CommandError: {err}")
            sys.exit(err.returncode)
        except JobFSMError as err:  # the handlers could not be loaded: as `jobfsm` says it
            self.stderr.write(f"error: {err}")
            sys.exit(2)
        run(self.command, args, prog_name=f"{argv[0]} {argv[1]}")

    def handle(self, *args: str, **options: Any) -> None:
        """call_command's path (positional strings only)."""
        run(self.command, self.run_args(list(args)), prog_name=f"manage.py {self.command.name}")

    def run_args(self, given: list[str]) -> list[str]:
        return given if "--help" in given else self.arguments(given)


def without_django_options(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in DJANGO_OPTIONS)):
            out.append(arg)
    return out


def worker_args(given: list[str]) -> list[str]:
    """`jobfsm worker`'s arguments: --app JOBFSM['HANDLERS'], --store the project's store,
    JOBFSM['WORKER_ARGS'], then `given` (a later option wins over an earlier one)."""
    cfg = config()
    named = any(a == "--app" or a.startswith("--app=") for a in given)
    if cfg.handlers is None and not named:
        raise CommandError(
            "jobfsm_worker: no handlers: set JOBFSM['HANDLERS'] = 'module:obj' (the worker's "
            "--app) in settings, or pass --app"
        )
    app = [] if cfg.handlers is None else ["--app", cfg.handlers]
    return [*app, "--store", cfg.store, *cfg.worker_args, *given]


def prepare_children(args: list[str]) -> None:
    """Let a process executor's children set Django up (each is a fresh process that
    keeps only an allow-list of the environment): they keep DJANGO_SETTINGS_MODULE and
    JOBFSM['CHILD_ENV'], and handlers that declare no `child_init` get `setup_child`.

    The handlers are loaded by the CLI's own `load_app`, as `jobfsm worker` then loads
    them (the same module object)."""
    keep = ["DJANGO_SETTINGS_MODULE", *config().child_env]
    extra = os.environ.get(CHILD_ENV_VAR, "")
    os.environ[CHILD_ENV_VAR] = ",".join(n for n in [extra, *keep] if n)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
    ref = last_option(args, "--app")
    if ref is None:
        return
    handlers = load_app(ref)
    if isinstance(handlers, Handlers) and handlers.hooks.child_init is None:
        handlers.child_init(setup_child)


def last_option(args: list[str], name: str) -> str | None:
    """The value of the last `name VALUE` or `name=VALUE` in `args` (click's winner)."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(f"{name}="):
            found = arg.split("=", 1)[1]
    return found
