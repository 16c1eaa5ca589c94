"""`jobfsm demo`: the main job, a crash-injecting workload on the embedded SQLite default."""

from __future__ import annotations

import sys

import click

from ..text import printable
from .logsetup import setup_logging
from .options import Seconds, log_options


@click.command()
@click.option("--jobs", type=click.IntRange(1, 100_000), default=300, show_default=True)
@click.option(
    "--workers", type=click.IntRange(1, 64), default=3, show_default=True, help="Processes."
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Handler threads per worker process.",
)
@click.option(
    "--crash-every",
    type=Seconds(minimum=0.1),
    default=1.5,
    show_default=True,
    help="Seconds between injected SIGKILLs of a worker process.",
)
@click.option(
    "--store", metavar="URL", default=None, help="Run on this store [default: a fresh SQLite file]."
)
@click.option("--seed", type=int, default=None, help="Reproduce a run [default: random].")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to write the database, logs, diagram and summary [default: a new temp dir].",
)
@click.option(
    "--timeout",
    type=Seconds(minimum=1),
    default=120.0,
    show_default=True,
    help="Give up (and fail) after SECONDS.",
)
@log_options("WARNING")
def demo(
    *,
    jobs: int,
    workers: int,
    concurrency: int,
    crash_every: float,
    store: str | None,
    seed: int | None,
    directory: str | None,
    timeout: float,
    log_level: str,
    log_format: str,
) -> None:
    """Run a realistic workload through worker processes while killing them.

    Submits JOBS jobs of four kinds (fast, slow, flaky, and a retry-unsafe charge),
    cancels a few, starts WORKERS worker processes and kills one with SIGKILL about
    every CRASH_EVERY seconds (a replacement starts at once; one worker is down at a
    time, and crashes stop after half of TIMEOUT). Then it checks that no
    job was lost, every job is final, no effect was committed twice and every audit
    trail replays to its record; prints a summary and writes the lifecycle diagram
    with the observed transition counts. Exits 1 if any check fails.
    """
    from ..demo.run import Config, run_demo

    setup_logging(log_level, log_format)
    cfg = Config(
        jobs=jobs,
        workers=workers,
        concurrency=concurrency,
        crash_every=crash_every,
        store=store,
        seed=seed,
        directory=directory,
        timeout=timeout,
    )

    def echo(text: str) -> None:  # the summary quotes stored reasons: escape them
        click.echo(printable(text, keep="\n"))

    result = run_demo(cfg, echo, live=sys.stdout.isatty())
    if not result.ok:
        sys.exit(1)
