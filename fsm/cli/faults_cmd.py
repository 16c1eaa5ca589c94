"""`jobfsm faults`: run the hypothesis fault suite against a store URL."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from . import cli
from ._common import store_option

PROFILES = ("dev", "ci", "thorough")


@cli.command("faults")
@store_option
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
    help="Steps per example [default: the profile's: ci 50, thorough 100].",
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
def faults(
    *,
    store: str | None,
    examples: int | None,
    steps: int | None,
    seed: int | None,
    profile: str | None,
    no_shrink: bool,
) -> None:
    """Check the invariants of specs/invariants.md against a store under injected faults.

    Each example gets a fresh store (memory://, a new SQLite file, a PostgreSQL
    schema); workers crash, stall and come back as zombies, the clock jumps,
    reports are duplicated and reordered, store calls fail before and after
    commit. Exits 0 only if every invariant held; otherwise prints the shrunk
    failing step sequence as a runnable program.
    """
    from ..registry import store_url
    from ..testing.faults import run_faults
    from ..testing.profiles import load_profile

    url = store_url(store)
    chosen = load_profile(profile)
    from hypothesis import settings

    total = examples or settings.get_profile(chosen).max_examples
    # Rejected stale reports are logged as warnings by design; here they are the point.
    logging.getLogger("fsm.transitions").setLevel(logging.ERROR)
    label = f"faults {_shown(url)}"
    with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True) as bar:
        done = [0]

        def progress(stats: Any) -> None:
            ahead = min(stats.examples, total) - done[0]
            if ahead > 0:
                bar.update(ahead)
                done[0] += ahead

        report = run_faults(
            url,
            examples=examples,
            steps=steps,
            seed=seed,
            profile=chosen,
            progress=progress,
            shrink=not no_shrink,
        )
    click.echo(
        f"profile {report.profile}: {report.examples} examples, {report.steps} steps "
        f"in {report.seconds:.1f}s"
    )
    click.echo(f"faults injected ({sum(report.faults.values())}):")
    for name, n in sorted(report.faults.items(), key=lambda kv: (-kv[1], kv[0])):
        click.echo(f"  {n:8d}  {name}")
    click.echo(f"invariant checks ({report.invariants_checked}):")
    for name, n in sorted(report.checks.items()):
        click.echo(f"  {n:8d}  {name}")
    for note in report.notes:
        click.echo(f"note: {note}")
    if report.ok:
        click.echo("ok: every invariant held")
        return
    click.echo(f"FAILED: {report.failure}", err=True)
    if report.reproduction:
        click.echo("\nshrunk failing sequence (runnable):\n", err=True)
        click.echo(report.reproduction, err=True)
    sys.exit(1)


def _shown(url: str) -> str:
    """The URL without a password."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url
