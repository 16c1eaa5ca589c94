"""jobfsm benchmarks against its peers, in one run: `python -m benchmarks [--quick]`.

Suites (all by default; pick with --suites):
  throughput  jobfsm end to end: SQLite, PostgreSQL, PostgreSQL + RabbitMQ; 1 and 4 workers
              (threads per process swept, best shape reported) and 4 equal slots, worker
              CPU per job; the raw baselines batched like its best 1-worker shape, and
              its engine path alone (the floor of its CPU per job); decide's cost; a
              recovered job's place
  peers       procrastinate, dramatiq and celery the same way, each swept over processes x
              concurrency (best shape reported), with equal-durability rows; and the raw
              baselines (plain sqlite3, psycopg, pika) on this machine
  pairs       the broker path against dramatiq's best and against polling, 1 and 4 worker
              processes, in alternated rounds (the goals on the median of the rounds'
              ratios, every round kept); the machine CPU the broker adds per job
  latency     submit to start, p50 / p99 / max, at 10, 100 and 1,000 jobs/s offered
              (open loop) to idle workers: every jobfsm path and every peer at its
              low-latency setting, and a submit inside the caller's transaction
  recovery    kill -9 (and SIGSTOP) of a worker mid-job: jobfsm beside each peer
  scale       lease latency and throughput with 0 / 100k / 1M finished rows (PostgreSQL also
              10M, then a retention prune of 9M); worker memory

Results go to a JSON-lines file (one line of machine facts, then one line per
figure) and, in a full run, into the generated block of docs/benchmarks.md. The
report prints every goal (benchmarks/goals.py) as met, not met or not measured.
--quick runs every suite at smoke size (CI checks that it completes); its figures
are not fit to quote. Peers come from the `bench` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click

from benchmarks.harness import (
    REPO,
    Config,
    Measurement,
    Task,
    machine_facts,
    read_jsonl,
    write_jsonl,
)
from benchmarks.report import Report, fmt, splice
from fsm.display.terminal import progress_bar

SUITES = {
    "throughput": "benchmarks.throughput",
    "peers": "benchmarks.peers.measure",
    "pairs": "benchmarks.pairs",
    "latency": "benchmarks.latency",
    "recovery": "benchmarks.crash.suite",
    "scale": "benchmarks.scale",
}
DOCS = REPO / "docs" / "benchmarks.md"
DOCS_RESULTS = REPO / "docs" / "benchmarks.jsonl"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke size: every suite, small numbers"
    )
    parser.add_argument(
        "--suites",
        default=",".join(SUITES),
        help=f"comma-separated subset of {','.join(SUITES)} [all]",
    )
    parser.add_argument(
        "--jobs", type=int, help="no-op jobs per throughput run [quick 300, full 5000]"
    )
    parser.add_argument("--repeats", type=int, help="runs per throughput figure [quick 1, full 3]")
    parser.add_argument(
        "--recovery-runs", type=int, help="kill -9 runs per scenario [quick 1, full 5]"
    )
    parser.add_argument(
        "--out", type=Path, help="JSON-lines results [benchmarks/results/<time>.jsonl]"
    )
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument(
        "--docs", action="store_true", help="write docs/benchmarks.md (the default of a full run)"
    )
    docs.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS.jsonl",
        help="print (and with --docs, write) the report of an earlier run; measures nothing",
    )
    args = parser.parse_args(argv)
    unknown = set(args.suites.split(",")) - set(SUITES)
    if unknown:
        parser.error(
            f"unknown suite(s) {', '.join(sorted(unknown))}; choose from {', '.join(SUITES)}"
        )
    for name in ("jobs", "repeats", "recovery_runs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return args


def run_tasks(tasks: list[Task]) -> tuple[list[Measurement], list[str]]:
    """Run every task behind one progress bar; a failing task is reported, not fatal."""
    rows: list[Measurement] = []
    failures: list[str] = []
    began = time.monotonic()
    with progress_bar("benchmarks", len(tasks)) as bar:
        for done, task in enumerate(tasks):
            bar.update(done, description=task.label)
            try:
                got = task.run()
            except Exception:
                failures.append(task.label)
                bar.print(f"FAILED {task.label}:\n{traceback.format_exc()}")
                continue
            rows += got
            for m in got:
                bar.print(f"  {m.label}: {fmt(m.median)} {m.unit}")
        bar.update(len(tasks), description="benchmarks")
    click.echo(f"{len(tasks)} tasks in {time.monotonic() - began:.0f} s", err=True)
    return rows, failures


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = f"python -m benchmarks {shlex.join(sys.argv[1:] if argv is None else argv)}".rstrip()
    write_docs = args.docs or not (args.quick or args.no_docs or args.render)
    if args.render:
        facts, command, rows = read_jsonl(args.render)
        failures: list[str] = []
    else:
        facts = machine_facts()
        with tempfile.TemporaryDirectory(prefix="jobfsm-bench-") as tmp:
            cfg = Config.make(
                quick=args.quick,
                tmp=Path(tmp),
                jobs=args.jobs,
                repeats=args.repeats,
                recovery_runs=args.recovery_runs,
            )
            tasks = [
                task
                for suite in args.suites.split(",")
                for task in importlib.import_module(SUITES[suite]).plan(cfg)
            ]
            rows, failures = run_tasks(tasks)
        out = args.out or REPO / "benchmarks" / "results" / time.strftime(
            "%Y%m%dT%H%M%SZ.jsonl", time.gmtime()
        )
        write_jsonl(out, facts, command, rows)
        click.echo(f"results: {out}", err=True)
    markdown = Report(rows).markdown(facts, command)
    click.echo(markdown)
    if write_docs:
        DOCS.write_text(splice(DOCS.read_text(), markdown))
        write_jsonl(DOCS_RESULTS, facts, command, rows)
        click.echo(f"wrote {DOCS.relative_to(REPO)} and {DOCS_RESULTS.relative_to(REPO)}", err=True)
    if failures:
        click.echo(f"{len(failures)} task(s) failed: {', '.join(failures)}", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
