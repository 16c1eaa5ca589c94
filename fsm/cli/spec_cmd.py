"""`jobfsm spec check`."""

from __future__ import annotations

import sys

import click

from ..lifecycle.spec import check_spec, default_spec_path
from .root import FullHelpGroup


@click.group(cls=FullHelpGroup)
def spec() -> None:
    """Work with the lifecycle spec."""


@spec.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def spec_check(file: str | None) -> None:
    """Validate a lifecycle spec (default: the one jobfsm ships)."""
    path = file or str(default_spec_path())
    lifecycle, problems = check_spec(path)
    if problems:
        for p in problems:
            click.echo(f"error: {p}", err=True)
        click.echo(f"{len(problems)} problem(s) in {path}", err=True)
        sys.exit(1)
    assert lifecycle is not None
    click.echo(
        f"ok: {path}: {len(lifecycle.states)} states, {len(lifecycle.events)} events, "
        f"{len(lifecycle.rules)} transitions"
    )
