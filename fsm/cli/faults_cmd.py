"""`jobfsm faults`: run the hypothesis fault suite against a store URL."""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from ..display.terminal import print_table, progress_bar
from ..errors import MissingExtra
from ..registry import load_delivery_faults
from ..secrets import redact_url
from ..text import printable
from .faults_parallel import run_parts, serve_as_part, sigterm_ends_run
from .logsetup import setup_logging
from .options import log_options

PROFILES = ("dev", "ci", "thorough")
#: most processes `--jobs` takes by itself (more cores than that: say --jobs N)
MAX_AUTO_JOBS = 4


@click.command("faults")
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
    "concurrency, executor, worker, claims, commits, pool, transactions, schedules, limits, "
    "unique, retention, payloads, reports, pauses, waits; delivery (with --delivery) for the "
    "broker's model.",
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
    "--coverage",
    "with_coverage",
    is_flag=True,
    help="Also measure which lines of fsm/service, fsm/worker, fsm/handling, fsm/lifecycle "
    "and adapters/ the run executed (coverage.py, in the testing extra) and print them "
    "per module.",
)
@click.option(
    "--exhaustive",
    is_flag=True,
    help="Instead of sampling, explore every interleaving of a small world (--scope) on "
    "memory:// or sqlite:///: distinct states and transitions are reported, and a "
    "failure as the shortest action sequence that breaks an invariant.",
)
@click.option(
    "--scope",
    default="reconcile",
    show_default=True,
    metavar="NAME",
    help="The world --exhaustive explores: tiny, reconcile, small or wide "
    "(docs/fault-suites.md says what each holds and how large it is).",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write the report (checks, faults, coverage, timings) as JSON to this file.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 16),
    default=None,
    help="Processes that run the machine and the fault models side by side [default: "
    "one more than the machine's cores, at most 4; 1 with --quick]. A run on a "
    "PostgreSQL URL that names its ?schema= runs in one process (the parts would share "
    "the schema).",
)
@click.option(
    "--verbose",
    is_flag=True,
    help="Show what the run's components log (warnings of rejected reports and broken "
    "connections, tracebacks of injected faults); hidden by default, as they are the "
    "faults the run injects.",
)
@log_options("WARNING")
def faults(
    *,
    jobs: int | None,
    verbose: bool,
    size: str | None,
    models: tuple[str, ...],
    json_out: str | None,
    exhaustive: bool,
    scope: str,
    with_coverage: bool,
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
    serve_as_part()  # a child of `--jobs N`: ends with its parent
    if with_coverage:
        _measured()  # runs this same command again, under coverage.py; exits
    if exhaustive:
        setup_logging(log_level, log_format)
        with _quiet(verbose), sigterm_ends_run():
            _exhaustive(store, scope, json_out)
        return
    # fsm.testing.faults names the testing extra (MissingExtra) when hypothesis is missing
    from ..testing.faults import MODELS, SIZES, check_engine, run_faults
    from ..testing.profiles import load_profile, settings_of

    known = ("machine", *(m.name for m in MODELS))
    unknown = sorted(set(models) - {*known, "delivery"})
    if unknown:
        raise click.BadParameter(
            f"unknown fault model {', '.join(unknown)}; known: {', '.join(known)}, delivery",
            param_hint="--model",
        )
    if "delivery" in models and delivery is None:
        raise click.BadParameter(
            "the delivery model runs against a broker: give its URL with --delivery amqp://...",
            param_hint="--model",
        )
    if models and set(models) == {"delivery"}:  # the broker's model alone
        assert delivery is not None
        setup_logging(log_level, log_format)
        with _quiet(verbose), sigterm_ends_run():
            _delivery_faults(delivery, size or "default", seed)
        click.echo("ok: every invariant held")
        return
    models = tuple(m for m in models if m != "delivery")
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
        total = settings_of(chosen).max_examples
    # Rejected stale reports are logged as warnings by design; here they are the point.
    logging.getLogger("fsm.transitions").setLevel(logging.ERROR)
    click.echo(f"faults {printable(redact_url(store))}", err=True)
    if seed is None and not settings_of(chosen).derandomize:
        # drawn here, not by hypothesis, so that the run can name it (and its parts
        # of --jobs N all get it): a failure, a Flaky one too, can be run again
        seed = random.SystemRandom().randrange(1 << 32)
        click.echo(f"seed {seed} (drawn: --seed {seed} makes the same draws)", err=True)
    machine_bar: list[Any] = []

    @contextmanager
    def announce(name: str) -> Iterator[None]:
        """One bar per fault model (done or not) and one for the machine's examples."""
        steps = total if name == "machine" else 1
        with progress_bar(f"  {name}", steps) as bar:
            machine_bar[:] = [bar] if name == "machine" else []
            yield
            bar.update(steps)

    def progress(stats: Any) -> None:
        if machine_bar:
            machine_bar[0].update(min(stats.examples, total))

    chosen_parts = [name for name in known if not models or name in models]
    processes = part_processes(jobs, store, size)
    if processes > 1 and len(chosen_parts) > 1:
        report = _side_by_side(
            chosen_parts,
            processes,
            _part_options(
                store=store,
                examples=examples,
                steps=steps,
                seed=seed,
                no_shrink=no_shrink,
                profile=profile,
                size=size,
                engine=engine,
                verbose=verbose,
                log_level=log_level,
                log_format=log_format,
            ),
            json_out,
        )
    else:
        with _quiet(verbose), sigterm_ends_run():
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
                announce=announce,
            )
    per_example = steps or (SIZES[size][1] if size else None)
    per_example = per_example or settings_of(chosen).stateful_step_count
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
        click.echo(f"note: {printable(note)}")
    if json_out:
        import json

        import attrs

        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(attrs.asdict(report), fh, indent=2, sort_keys=True)
    if report.ok and delivery is not None:
        with _quiet(verbose), sigterm_ends_run():
            _delivery_faults(delivery, size or "default", seed)
    if report.ok:
        click.echo("ok: every invariant held")
        return
    if report.failed_model:
        click.echo(f"failed in fault model: {report.failed_model}", err=True)
    click.echo(f"FAILED: {printable(report.failure, keep=chr(10))}", err=True)
    if report.reproduction:
        click.echo("\nshrunk failing sequence (runnable):\n", err=True)
        click.echo(report.reproduction, err=True)
    sys.exit(1)


def part_processes(jobs: int | None, store: str, size: str | None) -> int:
    """How many processes run the parts: `jobs`, else one more than the cores (at most
    4), or one for `--quick` (a process's start-up costs more than its share of a quick
    run saves); one when a PostgreSQL URL names its schema (every part would work in it).

    One more than the cores: a part that waits for its store (a PostgreSQL round trip,
    a SQLite commit's fsync) leaves its core idle, and the parts end unevenly. On 2
    cores, idle, 3 processes against 2 took a default run on PostgreSQL from 140 s to
    101 s, SQLite from 30 s to 25 s and memory from 22 s to 18 s; 4 gave no more than 3
    on PostgreSQL (103 s, both cores busy) (docs/fault-suites.md)."""
    from ..testing.faults import named_schema

    if named_schema(store):
        return 1
    if jobs is not None:
        return jobs
    if size == "quick":
        return 1
    return max(1, min(_cores() + 1, MAX_AUTO_JOBS))


def _cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one
    (Linux), else the machine's count (macOS has no `os.sched_getaffinity`)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _part_options(
    *,
    store: str,
    examples: int | None,
    steps: int | None,
    seed: int | None,
    no_shrink: bool,
    profile: str | None,
    size: str | None,
    engine: str,
    verbose: bool,
    log_level: str,
    log_format: str,
) -> list[str]:
    """The options every child of `--jobs` runs with: the parent's own."""
    out = ["--store", store, "--engine", engine, "--log-level", log_level]
    out += ["--log-format", log_format]
    for flag, value in (("--examples", examples), ("--steps", steps), ("--seed", seed)):
        if value is not None:
            out += [flag, str(value)]
    if profile is not None:
        out += ["--profile", profile]
    if size in ("quick", "thorough"):
        out.append(f"--{size}")
    if no_shrink:
        out.append("--no-shrink")
    if verbose:
        out.append("--verbose")
    return out


def _side_by_side(
    parts: list[str], processes: int, options: list[str], json_out: str | None
) -> Any:
    """The run's `parts` in `processes` children (fsm.cli.faults_parallel); one report.
    A failing child's report goes to `json_out` before the run exits."""
    import time

    import attrs

    from ..testing.faults_parts import merge, report_of, split

    started = time.monotonic()
    groups = split(parts, processes)
    reports = [report_of(data) for data in run_parts(options, groups, json_out)]
    merged = merge(reports, time.monotonic() - started)
    # in the order one process runs them: the models, then the machine
    order = [name for name in parts if name != "machine"] + ["machine"]
    timed = {name: merged.models[name] for name in order if name in merged.models}
    return attrs.evolve(merged, models=timed)


@contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Unless `verbose`: no log records and no tracebacks of threads that died of an
    injected fault while the run lasts (they are what the run injects; the summary
    says what broke). Restored after."""
    if verbose:
        yield
        return
    hook = threading.excepthook
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None
    try:
        yield
    finally:
        threading.excepthook = hook
        logging.disable(logging.NOTSET)


def _delivery_faults(url: str, size: str, seed: int | None) -> None:
    """Run the delivery's fault model (found by URL scheme); exit 1 on a broken promise."""
    run = load_delivery_faults(url)
    with progress_bar(f"delivery faults {printable(redact_url(url))}", 1) as bar:
        found = run(url, size=size, seed=seed, progress=lambda n, t: bar.update(n / t))
    print_table(
        [[str(n), name] for name, n in sorted(found.faults.items(), key=lambda kv: -kv[1])],
        ["count", "delivery fault"],
        title=f"delivery faults ({found.jobs} jobs, {found.acked} acks checked)",
    )
    if found.violations:
        click.echo("failed in fault model: delivery", err=True)
        for violation in found.violations[:10]:
            click.echo(f"FAILED: {printable(violation)}", err=True)
        sys.exit(1)
    click.echo("delivery: no wake-up acked before its lease committed; no job lost or run twice")
    bound = getattr(found, "liveness_bound", None)
    if bound is not None:
        click.echo(
            f"delivery: every job leased within {bound:g} s of its commit or the broker's "
            f"return (slowest {found.slowest_lease:.1f} s; {found.publish_failed} wake-ups "
            "whose publish failed, republished by the repair sweep); each connection failure "
            "cost one recovery attempt"
        )


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


def _exhaustive(store: str, scope: str, json_out: str | None) -> None:
    """`--exhaustive`: every interleaving of the scope's world; exit 1 on a broken invariant."""
    try:
        from ..testing.explore import explore, scope_named
    except ModuleNotFoundError as err:  # fsm.testing needs hypothesis
        raise MissingExtra(
            f"jobfsm faults --exhaustive ({err.name} is missing)", "testing"
        ) from err

    chosen = scope_named(scope)  # before anything runs: a clear error
    click.echo(f"scope {chosen.name}: {chosen.about}")
    # Rejected stale reports and recoveries are logged as warnings by design.
    logging.getLogger("fsm").setLevel(logging.ERROR)
    found = explore(chosen, store)
    click.echo(
        f"explored {found.states} distinct states and {found.transitions} transitions "
        f"(deepest {found.depth} actions) in {found.seconds:.1f}s"
        + ("" if found.complete else " (stopped at the state bound: not complete)")
    )
    if json_out:
        import json

        import attrs

        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(attrs.asdict(found), fh, indent=2, sort_keys=True)
    if found.ok:
        click.echo("ok: every invariant held in every reachable state of the scope")
        return
    if found.failure is None:
        click.echo("FAILED: the state bound was reached before the scope was explored", err=True)
        sys.exit(1)
    click.echo(f"FAILED: {printable(found.failure)}", err=True)
    click.echo(f"\nshortest failing trace ({len(found.trace)} actions, runnable):\n", err=True)
    click.echo(found.program(), err=True)
    sys.exit(1)


def _measured() -> None:
    """`--coverage`: this command again in a child interpreter under coverage.py (so the
    lines run at import count too), then the lines it executed per module."""
    import tempfile
    from pathlib import Path

    from ..testing.faults_coverage import loaded, measured_run

    if "faults" not in sys.argv:
        raise click.UsageError("--coverage runs from the command line (jobfsm faults ...)")
    args = [a for a in sys.argv[sys.argv.index("faults") :] if a != "--coverage"]
    with tempfile.TemporaryDirectory(prefix="jobfsm-coverage-") as tmp:
        data = Path(tmp) / "faults"
        code = measured_run(args, data)
        _lines(loaded([data]))
    sys.exit(code)


def _lines(cov: Any) -> None:
    """The lines of the shipped rooms this run executed, per module (faults_coverage)."""
    from ..testing.faults_coverage import modules, problems

    rows = modules(cov)
    print_table(
        [
            [
                m.path,
                str(m.statements),
                str(m.missed),
                f"{m.percent:.1f}%",
                "excluded" if m.bound is None else f"{m.bound:g}%",
            ]
            for m in rows
        ],
        ["module", "lines", "missed", "covered", "bound"],
        title="lines executed by this run",
    )
    for line in problems(rows):
        click.echo(f"under its bound in this run: {line}")
