"""`jobfsm faults`: run the hypothesis fault suite against a store URL."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from . import cli
from ._common import clean, console, log_options, print_table, redact, setup_logging

PROFILES = ("dev", "ci", "thorough")


@cli.command("faults")
@click.option(
    "--store",
    "store",
    metavar="URL",
    required=True,
    help="Kind of store to test: memory://, sqlite:///path.db (fresh files beside it) or "
    "postgresql://... (a fresh schema per example). Required: never taken from $JOBFSM_STORE.",
)
@click.option(
    "--examples",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Examples to generate [default: the profile's: ci 200, thorough 2000].",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 1_000),
    default=None,
    help="Most steps per example [default: the profile's: ci 50, thorough 100].",
)
@click.option("--seed", type=int, default=None, help="Seed, for a reproducible run.")
@click.option(
    "--no-shrink",
    is_flag=True,
    help="Report the first failing sequence as found, without shrinking it (faster).",
)
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default=None,
    help="Hypothesis settings profile [default: $JOBFSM_PROFILE, else ci under CI, else dev].",
)
@log_options("WARNING")
def faults(
    *,
    store: str,
    examples: int | None,
    steps: int | None,
    seed: int | None,
    profile: str | None,
    no_shrink: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Check the invariants of specs/invariants.md against a store under injected faults.

    Each example gets a fresh store (memory://, a new SQLite file, a PostgreSQL
    schema), dropped at the end; workers crash, stall and come back as zombies, the
    clock jumps, reports are duplicated and reordered, store calls fail before and
    after commit. Exits 0 only if every invariant held; otherwise prints the shrunk
    failing step sequence as a runnable program.
    """
    from hypothesis import settings
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..testing.faults import run_faults
    from ..testing.profiles import load_profile

    setup_logging(log_level, log_format)
    chosen = load_profile(profile)
    total = examples or settings.get_profile(chosen).max_examples
    # Rejected stale reports are logged as warnings by design; here they are the point.
    logging.getLogger("fsm.transitions").setLevel(logging.ERROR)
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console(err=True)) as bar:
        task = bar.add_task(f"faults {clean(redact(store))}", total=total)

        def progress(stats: Any) -> None:
            bar.update(task, completed=min(stats.examples, total))

        report = run_faults(
            store,
            examples=examples,
            steps=steps,
            seed=seed,
            profile=chosen,
            progress=progress,
            shrink=not no_shrink,
        )
    per_example = steps or settings.get_profile(chosen).stateful_step_count
    # The suite counts invariant passes (report.steps): one after each example's set-up and
    # one after each step; hypothesis may end an example before its last step.
    click.echo(
        f"profile {report.profile}: {report.examples} examples of at most {per_example} steps; "
        f"{report.steps} invariant passes (after each example's set-up and each step) "
        f"in {report.seconds:.1f}s"
    )
    print_table(
        [[str(n), name] for name, n in sorted(report.faults.items(), key=lambda kv: -kv[1])],
        ["count", "fault"],
        title=f"faults injected ({sum(report.faults.values())})",
    )
    print_table(
        [[str(n), name] for name, n in sorted(report.checks.items())],
        ["count", "invariant"],
        title=f"invariant checks ({report.invariants_checked})",
    )
    for note in report.notes:
        click.echo(f"note: {clean(note)}")
    if report.ok:
        click.echo("ok: every invariant held")
        return
    click.echo(f"FAILED: {clean(report.failure, keep=chr(10))}", err=True)
    if report.reproduction:
        click.echo("\nshrunk failing sequence (runnable):\n", err=True)
        click.echo(report.reproduction, err=True)
    sys.exit(1)
