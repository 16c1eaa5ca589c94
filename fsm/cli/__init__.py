"""The `jobfsm` command line: one module per command group, registered on `cli`."""

from __future__ import annotations

import inspect
import sys

import click

from ..errors import JobFSMError


class FullHelpGroup(click.Group):
    """A group whose --help lists each command's whole summary (its help's first
    paragraph), wrapped to the terminal, instead of cutting it short with "..."."""

    group_class = type  # subgroups (`jobfsm spec`) list their commands the same way

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            text = cmd.short_help or inspect.cleandoc(cmd.help or "").split("\n\n")[0]
            rows.append((name, " ".join(text.split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=FullHelpGroup)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """jobfsm: background jobs that survive crashes."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _one_line(err: BaseException | str) -> str:
    """An error message on one line (driver messages often span several), with control
    characters escaped (messages may quote stored text)."""
    from ._common import clean

    return clean(" ".join(str(err).split()))


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as err:  # one line, with where to look
        where = err.ctx.command_path if err.ctx is not None else "jobfsm"
        click.echo(f"error: {_one_line(err.format_message())} (see `{where} --help`)", err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except JobFSMError as err:
        if debug:
            raise
        click.echo(f"error: {_one_line(err)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as err:  # a driver or OS error no adapter translated: still one line
        if debug:
            raise
        text = _one_line(err) or "(no message)"
        click.echo(f"error: {type(err).__name__}: {text} (--debug shows the traceback)", err=True)
        sys.exit(1)


# Command modules register themselves on `cli` when imported (keep this list sorted).
from . import (  # noqa: E402
    dashboard_cmd,  # noqa: F401
    demo_cmd,  # noqa: F401
    diagram_cmd,  # noqa: F401
    faults_cmd,  # noqa: F401
    ops_cmd,  # noqa: F401
    recover_cmd,  # noqa: F401
    schedules_cmd,  # noqa: F401
    spec_cmd,  # noqa: F401
    worker_cmd,  # noqa: F401
)
