"""`jobfsm recover`: run the recovery sweep once, from an operator's shell.

It is the same sweep every worker runs (`fsm.recovery.sweep`): lapsed leases are
expired, jobs of owners this process can confirm dead (same host: pid gone; on
PostgreSQL: liveness token free) are expired at once, passed deadlines fail.
"""

from __future__ import annotations

import click

from ..owner import current
from ..ports import ConfirmsDeath
from ..recovery import SWEEP_LIMIT, sweep
from . import cli
from ._common import emit_json, engine_for, json_option, store_option


@cli.command()
@click.option(
    "--judge/--no-judge",
    default=True,
    show_default=True,
    help="Also judge owners (confirmed deaths are recovered at once); "
    "--no-judge expires only lapsed leases.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=SWEEP_LIMIT,
    show_default=True,
    help="Most jobs each step of the sweep looks at.",
)
@store_option
@json_option
def recover(*, judge: bool, limit: int, store: str | None, as_json: bool) -> None:
    """Run one recovery sweep now: the same sweep every worker runs."""
    with engine_for(store) as engine:
        identity = current() if judge else None
        probe = engine.store.liveness.probe if isinstance(engine.store, ConfirmsDeath) else None
        report = sweep(engine, identity, probe, limit=limit)
    if as_json:
        emit_json(
            {
                "expired": report.expired,
                "to_investigate": report.to_investigate,
                "deadlines": report.deadlines,
                "moved_meanwhile": report.errors,
                "released": report.released,
            }
        )
        return
    click.echo(
        f"recovered {report.expired} job(s) ({report.to_investigate} to investigate), "
        f"failed {report.deadlines} past their deadline"
        + (f", released {report.released} waiting job(s)" if report.released else "")
        + (f"; {report.errors} moved meanwhile and were left alone" if report.errors else "")
    )
