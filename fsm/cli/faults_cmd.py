"""`jobfsm faults`: run the hypothesis fault suite against a store URL."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from ..registry import load_delivery_faults
from . import cli
from ._common import clean, log_options, print_table, progress_bar, redact, setup_logging

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
@click.option(
    "--quick",
    "size",
    flag_value="quick",
    help="CI smoke size: a few seconds per fault model.",
)
@click.option(
    "--thorough",
    "size",
    flag_value="thorough",
    help="Nightly size: about ten times the default.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="NAME",
    help="Run only this fault model (repeatable): machine, policy, races, verdicts, crash, "
    "concurrency, executor, worker.",
)
@click.option(
    "--delivery",
    metavar="URL",
    default=None,
    help="Also run the delivery's fault model against the broker at URL (amqp://...): "
    "connection and channel closes, duplicate and reordered wake-ups; no wake-up may be "
    "acked before its lease commits, no job lost or run twice.",
)
@click.option(
    "--engine",
    type=click.Choice(("sync", "async")),
    default="sync",
    show_default=True,
    help="How the main machine submits and acts as operator: the Engine, or AsyncEngine "
    "over the store's asyncio twin (postgresql:// only), with the same store faults.",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write the report (checks, faults, coverage, timings) as JSON to this file.",
)
@log_options("WARNING")
def faults(
    *,
    size: str | None,
    models: tuple[str, ...],
    json_out: str | None,
    delivery: str | None,
    engine: str,
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

    from ..testing.faults import MODELS, SIZES, check_engine, run_faults
    from ..testing.profiles import load_profile

    known = ("machine", *(m.name for m in MODELS))
    unknown = sorted(set(models) - set(known))
    if unknown:
        raise click.BadParameter(
            f"unknown fault model {', '.join(unknown)}; known: {', '.join(known)}",
            param_hint="--model",
        )
    check_engine(engine, store)  # before the progress bar: a clear error, nothing run
    setup_logging(log_level, log_format)
    chosen = load_profile(profile)
    if size is None and profile is None:
        size = "default"
    if examples:
        total = examples
    elif size:
        total = SIZES[size][0]
    else:
        total = settings.get_profile(chosen).max_examples
    # Rejected stale reports are logged as warnings by design; here they are the point.
    logging.getLogger("fsm.transitions").setLevel(logging.ERROR)
    with progress_bar(f"faults {clean(redact(store))}", total) as bar:

        def progress(stats: Any) -> None:
            bar.update(min(stats.examples, total))

        report = run_faults(
            store,
            examples=examples,
            steps=steps,
            seed=seed,
            profile=chosen,
            progress=progress,
            shrink=not no_shrink,
            size=size,
            models=[m for m in models if m != "machine"] if models else None,
            machine=not models or "machine" in models,
            engine=engine,
        )
    per_example = steps or (SIZES[size][1] if size else None)
    per_example = per_example or settings.get_profile(chosen).stateful_step_count
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
    _coverage(report)
    for note in report.notes:
        click.echo(f"note: {clean(note)}")
    if json_out:
        import json

        import attrs

        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(attrs.asdict(report), fh, indent=2, sort_keys=True)
    if report.ok and delivery is not None:
        _delivery_faults(delivery, size or "default", seed)
    if report.ok:
        click.echo("ok: every invariant held")
        return
    if report.failed_model:
        click.echo(f"failed in fault model: {report.failed_model}", err=True)
    click.echo(f"FAILED: {clean(report.failure, keep=chr(10))}", err=True)
    if report.reproduction:
        click.echo("\nshrunk failing sequence (runnable):\n", err=True)
        click.echo(report.reproduction, err=True)
    sys.exit(1)


def _delivery_faults(url: str, size: str, seed: int | None) -> None:
    """Run the delivery's fault model (found by URL scheme); exit 1 on a broken promise."""
    run = load_delivery_faults(url)
    with progress_bar(f"delivery faults {clean(redact(url))}", 1) as bar:
        found = run(url, size=size, seed=seed, progress=lambda n, t: bar.update(n / t))
    print_table(
        [[str(n), name] for name, n in sorted(found.faults.items(), key=lambda kv: -kv[1])],
        ["count", "delivery fault"],
        title=f"delivery faults ({found.jobs} jobs, {found.acked} acks checked)",
    )
    if found.violations:
        click.echo("failed in fault model: delivery", err=True)
        for violation in found.violations[:10]:
            click.echo(f"FAILED: {clean(violation)}", err=True)
        sys.exit(1)
    click.echo("delivery: no wake-up acked before its lease committed; no job lost or run twice")


def _coverage(report: Any) -> None:
    """Which models ran and for how long, and the spec's (state, event) pairs reached."""
    ran = ", ".join(f"{name} {secs:.1f}s" for name, secs in report.models.items())
    click.echo(f"size {report.size}; fault models run: {ran}")
    pairs = report.coverage
    by_store = [p for p, n in pairs.items() if n["store"]]
    by_decide = [p for p, n in pairs.items() if n["decide"]]
    click.echo(
        f"spec coverage: {len(by_store)} of {len(pairs)} (state, event) pairs written by "
        f"the store; {len(by_decide)} of {len(pairs)} decided by the policy model"
    )
    missed = [p for p in pairs if p not in by_store]
    if missed:
        click.echo(f"  not written by the store in this run: {', '.join(missed)}")
