"""Latency, submit to start: from a submit's commit to its handler's first line.

    python -m benchmarks --suites latency            # every system, 10 / 100 / 1,000 jobs/s
    python -m benchmarks.latency --rates 100 --systems jobfsm.rabbitmq,dramatiq

Method, the same for every system (`benchmarks.latency_systems`):
- one worker process, idle and ready before the first job (jobfsm's ready file, a
  consumer on the peer's queue, procrastinate's LISTEN);
- open-loop arrivals: job i is due at i / rate seconds after the start, whatever the
  workers do (submitting threads sleep until each job is due; at 1,000 jobs/s four
  threads share the schedule); the moment each submit returns (its commit: jobfsm,
  procrastinate) is read from CLOCK_MONOTONIC; dramatiq's and celery's sends have no
  commit, and their message is out (often already running) before the call returns,
  so theirs are measured from the moment the send is called;
- each handler's first act stamps CLOCK_MONOTONIC (`benchmarks.stamps`): the latency
  of a job is its stamp minus its submit's return. p50, p99 (nearest rank) and the
  largest, in milliseconds, per offered load;
- every system runs each load once per repeat, the systems alternated within a
  repeat (fresh workers and stores each time), so each figure's spread is over
  repeats of the same run.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import Config, Measurement, Task
from benchmarks.latency_systems import SYSTEMS, Client, System
from benchmarks.stamps import read

RATES = (10, 100, 1_000)
#: jobs per offered load (jobs/s -> jobs), full and quick
JOBS = {10: 100, 100: 1_000, 1_000: 2_000}
QUICK_JOBS = {10: 3, 100: 10, 1_000: 20}
SUBMITTERS = {10: 1, 100: 1, 1_000: 4}  # threads sharing the open-loop schedule
WARM = 5  # jobs run before the first load (connections, imports), not counted
LEAD = 0.05  # s: the first job's due time after the schedule is made
STATS = ("p50", "p99", "max")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile `q` (0-100] of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(latencies: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of `latencies` (seconds), in milliseconds."""
    return {
        "p50": percentile(latencies, 50) * 1e3,
        "p99": percentile(latencies, 99) * 1e3,
        "max": max(latencies) * 1e3,
    }


def offer(
    client: Client, first: int, jobs: int, rate: float, threads: int, *, from_call: bool = False
) -> dict[int, float]:
    """Submit jobs `first`..`first + jobs - 1` on an open-loop schedule of `rate` jobs/s;
    job number -> the moment its submit returned (CLOCK_MONOTONIC), or with
    `from_call` the moment it was called."""
    done: dict[int, float] = {}
    errors: list[BaseException] = []
    began = time.monotonic() + LEAD

    def run(k: int) -> None:
        try:
            submit = client()
            for i in range(k, jobs, threads):
                wait = began + i / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                called = time.monotonic()
                submit(first + i)
                done[first + i] = called if from_call else time.monotonic()
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return done


def wait_started(stamps: Path, wanted: Sequence[int], timeout: float) -> dict[int, float]:
    """The stamps of the jobs `wanted`, once every one has started; raise after `timeout`."""
    until = time.monotonic() + timeout
    while True:
        got = read(stamps)
        missing = [n for n in wanted if n not in got]
        if not missing:
            return got
        if time.monotonic() > until:
            raise TimeoutError(f"{len(missing)} of {len(wanted)} jobs never started: {missing[:5]}")
        time.sleep(0.05)


def measure(system: System, folder: Path, loads: dict[int, int]) -> dict[int, dict[str, float]]:
    """One run of `system`: each offered load (jobs/s -> jobs) in turn, fresh workers;
    jobs/s -> its p50/p99/max (ms), the achieved rate and the jobs."""
    stamps = folder / f"stamps-{system.key}-{time.monotonic_ns()}"
    out: dict[int, dict[str, float]] = {}
    with system.open(folder, stamps) as client:
        wait_started(stamps, list(offer(client, 0, WARM, 20.0, 1)), 60.0)
        first = WARM
        for rate, jobs in loads.items():
            threads = SUBMITTERS.get(rate, 1)
            submitted = offer(client, first, jobs, rate, threads, from_call=system.from_call)
            span = max(submitted.values()) - min(submitted.values())
            started = wait_started(stamps, list(submitted), 60.0 + jobs / 20)
            latencies = [started[n] - at for n, at in submitted.items()]
            out[rate] = {
                **summary(latencies),
                "achieved": (jobs - 1) / span if span > 0 else math.nan,
                "jobs": jobs,
            }
            first += jobs
    return out


def run(
    systems: Sequence[System], loads: dict[int, int], repeats: int, folder: Path
) -> list[Measurement]:
    """Every system, `repeats` times alternated; one Measurement per system, load and
    statistic. A run that fails is printed and left out of its figures."""
    folder.mkdir(parents=True, exist_ok=True)  # a SQLite system's file goes straight in it
    got: dict[str, list[dict[int, dict[str, float]]]] = {s.key: [] for s in systems}
    failed: dict[str, int] = {}
    for _ in range(repeats):
        for system in systems:
            try:
                got[system.key].append(measure(system, folder, loads))
            except Exception:
                failed[system.key] = failed.get(system.key, 0) + 1
                print(f"latency: {system.key} failed:\n{traceback.format_exc()}", file=sys.stderr)
    rows = []
    for system in systems:
        runs = got[system.key]
        for rate, jobs in loads.items():
            facts = {
                "jobs per run": jobs,
                "achieved jobs/s": [round(r[rate]["achieved"], 1) for r in runs],
                "submitting threads": SUBMITTERS.get(rate, 1),
                "failed runs": failed.get(system.key, 0),
            }
            for stat in STATS:
                rows.append(
                    Measurement(
                        f"latency.{system.key}.r{rate}.{stat}",
                        f"{system.label}: {stat}, {rate:,} jobs/s offered",
                        "ms",
                        [r[rate][stat] for r in runs],
                        system.settings,
                        facts=facts,
                    )
                )
    return rows


def plan(cfg: Config) -> list[Task]:
    loads = QUICK_JOBS if cfg.quick else JOBS
    folder = cfg.tmp / "latency"

    def task() -> list[Measurement]:
        return run(SYSTEMS, dict(loads), cfg.repeats, folder)

    return [Task(f"latency: {len(SYSTEMS)} systems x {len(loads)} loads", task)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__)
    parser.add_argument("--systems", default=",".join(s.key for s in SYSTEMS))
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--jobs", type=int, help="jobs per load [100 / 1,000 / 2,000]")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    by_key = {s.key: s for s in SYSTEMS}
    unknown = set(args.systems.split(",")) - set(by_key)
    if unknown:
        parser.error(f"unknown system(s) {sorted(unknown)}; choose from {sorted(by_key)}")
    rates = [int(r) for r in args.rates.split(",")]
    loads = {r: args.jobs or JOBS.get(r, 1_000) for r in rates}
    with tempfile.TemporaryDirectory(prefix="jobfsm-latency-") as tmp:
        rows = run([by_key[k] for k in args.systems.split(",")], loads, args.repeats, Path(tmp))
    for m in rows:
        shown = ", ".join(f"{v:.1f}" for v in m.values)
        print(f"{m.label}: {shown} ms  ({m.facts['achieved jobs/s']} jobs/s achieved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
