"""The root `jobfsm` group and `main`, the console script: errors become one line at
this edge. The command modules are added to `cli` by the package (`fsm/cli/__init__.py`)."""

from __future__ import annotations

import inspect
import sys

import click

from ..errors import JobFSMError
from ..text import printable


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
    return printable(" ".join(str(err).split()))


def main() -> None:
    run(cli)


def run(
    command: click.Command, args: list[str] | None = None, prog_name: str | None = None
) -> None:
    """Run `command` with `args` (default: the command line) as the console script does,
    errors as one line and an exit status; `manage.py jobfsm_worker` runs `jobfsm worker`
    through here."""
    debug = "--debug" in (sys.argv[1:] if args is None else args)
    try:
        command.main(args=args, prog_name=prog_name, standalone_mode=False)
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
