"""The whole machine's CPU per job: jobfsm polling, jobfsm with RabbitMQ, dramatiq.

    python -m benchmarks.machine_cpu                          # 5,000 jobs x 3, 1 process each
    python -m benchmarks.machine_cpu --jobfsm 4x256 --dramatiq 4x8 --jobs 10000 --markdown

Each system drains no-op jobs with its worker processes the way the throughput suite
drains them (workers ready and warmed up first; the same `process_rate` code), the
three back to back, repeat after repeat. Over each timed window `machine.Meter`
splits all the machine's CPU into the worker processes, the PostgreSQL server, the
RabbitMQ server, this process (it enqueues, and waits) and the rest, and reads how
busy the cores were. Printed: medians of the rate and of each share per job, the
ceiling (the jobs/s at which this cost per job would fill every core), and what the
goals against dramatiq ask of the machine's CPU per job. Run it on an idle machine:
the servers' shares count every client they serve.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from benchmarks import throughput
from benchmarks.goals import PAIR_BOUNDS, P
from benchmarks.harness import Config
from benchmarks.machine import CORES, SERVERS, Meter
from benchmarks.peers import dramatiq_bench

POLLING = "jobfsm PostgreSQL, polling"
RABBIT = "jobfsm PostgreSQL + RabbitMQ"
DRAMATIQ = "dramatiq (no confirms)"


def _goal() -> float:
    """The bound benchmarks/goals.py holds jobfsm's RabbitMQ path to against dramatiq."""
    key = f"{P}.w1.rabbitmq_over_dramatiq"
    for b in PAIR_BOUNDS:
        if b.key == key:
            return b.bound
    raise LookupError(f"benchmarks/goals.py has no bound on {key} (the RabbitMQ / dramatiq goal)")


GOAL = _goal()

Run = Callable[[Meter], float]


class Drain(NamedTuple):
    """One measured drain: its jobs/s and the machine's CPU over it."""

    rate: float
    meter: Meter


def systems(cfg: Config, jobfsm: tuple[int, int], dramatiq: tuple[int, int]) -> dict[str, Run]:
    """Each system's one measured drain: a Meter in, jobs/s out."""
    workers, threads = jobfsm
    return {
        POLLING: lambda m: throughput.process_rate("postgres", cfg, workers, threads, meter=m)[0],
        RABBIT: lambda m: throughput.process_rate("rabbitmq", cfg, workers, threads, meter=m)[0],
        DRAMATIQ: lambda m: dramatiq_bench.process_rate(
            cfg.jobs, dramatiq[0], cfg.tmp, dramatiq[1], meter=m
        )[0],
    }


def measure(runs: dict[str, Run], repeats: int, console: Console) -> dict[str, list[Drain]]:
    """Every system's drains, the systems taking turns within each repeat."""
    out: dict[str, list[Drain]] = {name: [] for name in runs}
    for i in range(repeats):
        for name, run in runs.items():
            with console.status(f"repeat {i + 1}/{repeats}: {name}"):
                meter = Meter()
                drain = Drain(run(meter), meter)
            out[name].append(drain)
            console.log(f"{name}: {drain.rate:,.0f} jobs/s, {meter.total:,.0f} us/job")
    return out


def median_of(drains: list[Drain], get: Callable[[Drain], float]) -> float:
    return statistics.median(get(d) for d in drains)


def table(results: dict[str, list[Drain]]) -> tuple[list[str], list[list[str]]]:
    """The header and rows: each figure a median over the repeats."""
    names = list(results)
    parts = list(next(iter(results.values()))[0].meter.per_job)
    rows = [["jobs/s", *(f"{median_of(results[n], _rate):,.0f}" for n in names)]]
    for part in parts:
        rows.append(
            [f"{part}, us/job", *(f"{median_of(results[n], _share(part)):,.0f}" for n in names)]
        )
    rows.append(["all, us/job", *(f"{median_of(results[n], _total):,.0f}" for n in names)])
    rows.append(
        ["cores busy", *(f"{median_of(results[n], lambda d: d.meter.busy):.0%}" for n in names)]
    )
    rows.append(
        [
            f"ceiling: jobs/s with all {CORES} cores busy",
            *(f"{median_of(results[n], lambda d: d.meter.ceiling):,.0f}" for n in names),
        ]
    )
    return ["", *names], rows


def _share(part: str) -> Callable[[Drain], float]:
    return lambda d: d.meter.per_job.get(part, 0.0)


def _total(d: Drain) -> float:
    return d.meter.total


def _rate(d: Drain) -> float:
    return d.rate


def reading(results: dict[str, list[Drain]]) -> list[str]:
    """What the figures say about the goals against dramatiq and against polling."""
    rate = {n: median_of(ds, _rate) for n, ds in results.items()}
    cost = {n: median_of(ds, _total) for n, ds in results.items()}
    pg = median_of(results[RABBIT], _share(SERVERS["postgres"]))
    wanted = GOAL * rate[DRAMATIQ]
    budget = CORES * 1e6 / wanted
    extra = {
        part: median_of(results[RABBIT], _share(part)) - median_of(results[POLLING], _share(part))
        for part in results[RABBIT][0].meter.per_job
    }
    lines = [
        f"RabbitMQ / polling: {rate[RABBIT] / rate[POLLING]:.2f}x the rate, "
        f"{cost[RABBIT] - cost[POLLING]:+,.0f} us of machine CPU per job ("
        + ", ".join(f"{part} {delta:+,.0f}" for part, delta in extra.items())
        + ")",
        f"RabbitMQ / dramatiq: {rate[RABBIT] / rate[DRAMATIQ]:.2f}x; polling / dramatiq: "
        f"{rate[POLLING] / rate[DRAMATIQ]:.2f}x",
        f"{GOAL}x dramatiq is {wanted:,.0f} jobs/s: with all {CORES} cores busy that leaves "
        f"{budget:,.0f} us of CPU per job for everything; jobfsm + RabbitMQ spends "
        f"{cost[RABBIT]:,.0f} (its PostgreSQL server alone {pg:,.0f}), dramatiq "
        f"{cost[DRAMATIQ]:,.0f}",
    ]
    return lines


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def shape(text: str) -> tuple[int, int]:
    processes, _, threads = text.partition("x")
    try:
        out = (int(processes), int(threads))
    except ValueError:
        msg = f"a shape is PROCESSESxTHREADS, e.g. 1x16: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if min(out) < 1:
        raise argparse.ArgumentTypeError(f"a shape needs at least 1 process and 1 thread: {text!r}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.machine_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=5_000, help="no-op jobs per drain [5000]")
    parser.add_argument("--repeats", type=int, default=3, help="drains per system [3]")
    parser.add_argument("--jobfsm", type=shape, default=(1, 128),
                        help="jobfsm worker processes x threads [1x128]")  # fmt: skip
    best = "1x16, its best 1-process shape in docs/benchmarks.md"
    parser.add_argument("--dramatiq", type=shape, default=(1, 16), help=f"its shape [{best}]")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeats < 1:
        parser.error("--jobs and --repeats must be at least 1")
    console = Console(stderr=True)
    with TemporaryDirectory() as tmp:
        cfg = Config(quick=False, jobs=args.jobs, repeats=1, recovery_runs=1, recovery_wait=1.0,
                     scale_rows=(0,), memory_jobs=1, tmp=Path(tmp))  # fmt: skip
        results = measure(systems(cfg, args.jobfsm, args.dramatiq), args.repeats, console)
    header, rows = table(results)
    (wp, wt), (dp, dt) = args.jobfsm, args.dramatiq
    title = (f"{args.jobs:,} no-op jobs x {args.repeats}, processes x threads: jobfsm {wp}x{wt}, "
             f"dramatiq {dp}x{dt}; medians")  # fmt: skip
    if args.markdown:
        print(f"{title}\n\n{markdown(header, rows)}\n")
    else:
        out = Table(*header, title=title)
        for row in rows:
            out.add_row(*row)
        Console().print(out)
    for line in reading(results):
        print(f"- {line}")


if __name__ == "__main__":
    main()
