"""`jobfsm recover`: run the recovery sweep once, from an operator's shell.

It is the same sweep every worker runs (`fsm.service.maintenance.sweep`): lapsed leases are
expired, jobs of owners this process can confirm dead (same host: pid gone; on
PostgreSQL: liveness token free) are expired at once, passed deadlines fail.
"""

from __future__ import annotations

import attrs
import click

from ..display.format import fmt_time
from ..ports import ConfirmsDeath
from ..service.identity import current
from ..service.maintenance import SWEEP_LIMIT, sweep
from ..text import printable
from .connect import engine_for
from .options import json_option, store_option
from .output import emit_json

#: deferred jobs `recover` names one a line (--json lists them all)
SHOWN_DEFERRED = 20


@click.command()
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
    """Run one recovery sweep now: the same sweep every worker runs.

    Jobs the sweep leaves for later on purpose are named with why and until when (a
    lost run of a kind with a reconciler this process lacks waits for a worker that
    has it, 60 s past its lease)."""
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
                "deferred": [
                    attrs.asdict(d) for d in {d.job_id: d for d in report.deferred}.values()
                ],
            }
        )
        return
    click.echo(
        f"recovered {report.expired} job(s) ({report.to_investigate} to investigate), "
        f"failed {report.deadlines} past their deadline"
        + (f", released {report.released} waiting job(s)" if report.released else "")
        + (f"; {report.errors} moved meanwhile and were left alone" if report.errors else "")
    )
    deferred = list({d.job_id: d for d in report.deferred}.values())  # one line a job
    if deferred:
        click.echo(f"left {len(deferred)} job(s) for later:")
        for d in deferred[:SHOWN_DEFERRED]:
            until = "the next sweep" if d.until is None else fmt_time(d.until)
            click.echo(f"  {d.job_id} ({printable(d.kind)}) until {until}: {printable(d.why)}")
        if len(deferred) > SHOWN_DEFERRED:
            click.echo(f"  ... and {len(deferred) - SHOWN_DEFERRED} more (--json lists them all)")
