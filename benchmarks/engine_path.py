"""The engine path alone: what a worker's claims and reports cost with no worker around them.

    python -m benchmarks.engine_path --store postgres --claim 128 --jobs 10000

A worker's CPU per no-op job is its engine path (the core's lease, start and succeed
decisions, the records they build, the store client's statements) plus what the
worker adds around it (threads, the run table, the executor hand-off, the reporter's
batching). This measures the first part by itself, in one thread of this process:
`--jobs` no-op jobs are submitted first (not timed), then drained by repeating

- `Engine.claim(..., limit=claim, kinds=..., start=...)`: claim-and-start, with the
  start arguments a worker passes (`fsm.worker.claims.start_args`), and
- `Engine.report_many` of each claimed job's `succeed`, as the reporter sends it,

timing this thread's CPU in each call (`time.thread_time`: user + system) over the
drain, and the claim's wall-clock time beside it (`benchmarks.calls.Timed`), with the
garbage collector tuned as `jobfsm worker` tunes its own (`fsm.worker.collector`;
restored afterwards), so the floor and the worker pay the same collector. The claim
size defaults to the largest a worker of `claim` threads makes (its free slots), so
the figure is the cheapest the engine path gets at that shape: a worker's CPU per job
cannot fall below it unless the core or the store client gets cheaper. The throughput
suite runs it beside the 1-worker row, in that row's best threads per process.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import attrs

from benchmarks.calls import Timed
from benchmarks.harness import Config, Measurement
from benchmarks.noop import engine_for, make_handlers, submit
from benchmarks.services import fresh_store_url
from fsm import Job, Owner
from fsm.worker.claims import start_args
from fsm.worker.collector import tune_collector

LIMIT_S = 600.0  # longest drain before the measurement gives up


@attrs.frozen
class Drain:
    """One drain, microseconds per job, split into its two calls."""

    claim_us: float  # Engine.claim with start: CPU of this thread
    report_us: float  # Engine.report_many of the succeeds: CPU of this thread
    jobs_per_s: float  # the drain's wall-clock rate (this thread alone, for context)
    claim_wall_us: float  # Engine.claim's wall-clock time: its CPU plus its waits

    @property
    def total_us(self) -> float:
        return self.claim_us + self.report_us


@contextmanager
def collector_as_in_a_worker() -> Iterator[None]:
    """This process's garbage collector as `jobfsm worker` sets it (`tune_collector`),
    restored afterwards: the floor and the worker it bounds pay the same collector."""
    before = gc.get_threshold()
    tuned = tune_collector()
    try:
        yield
    finally:
        if tuned:
            gc.unfreeze()
            gc.set_threshold(*before)


def drain(store: str, jobs: int, claim: int, tmp: Path) -> Drain:
    """Submit `jobs` no-op jobs to a fresh `store`, then claim and report them all here."""
    queue = f"path-{uuid.uuid4().hex[:8]}"
    spec = make_handlers(queue)["noop"]
    with fresh_store_url(store, tmp) as url:
        engine = engine_for(url, queue)
        try:
            submit(engine, jobs)
            owner = Owner("engine-path", os.getpid(), queue)
            args = start_args(spec, engine)
            claims, reports = Timed(engine, "claim"), Timed(engine, "report_many")
            with collector_as_in_a_worker():  # as the worker it bounds
                done = 0
                began = time.perf_counter()
                while done < jobs:
                    if time.perf_counter() - began > LIMIT_S:
                        raise TimeoutError(f"{jobs} jobs not drained within {LIMIT_S:g} s")
                    got = engine.claim(owner, [queue], limit=claim, kinds=("noop",),
                                       start=lambda _job: args)  # fmt: skip
                    results = engine.report_many(
                        [(j, "succeed", {"fence": j.fence, "result_json": "null"}) for j in got]
                    )
                    refused = [r for r in results if not isinstance(r, Job)]
                    if refused:
                        raise RuntimeError(f"the engine refused a report: {refused[0]}")
                    if not got:  # every job was due before the clock started
                        raise RuntimeError(f"a claim found no job with {jobs - done} not drained")
                    done += len(got)
                elapsed = time.perf_counter() - began
            succeeded = engine.counts().get((queue, "succeeded"), 0)
            if succeeded != jobs:
                raise RuntimeError(f"{succeeded} of {jobs} jobs succeeded after the drain")
        finally:
            engine.store.close()
    claim_wall, claim_cpu = claims.per_job(jobs)
    return Drain(claim_cpu, reports.per_job(jobs)[1], jobs / elapsed, claim_wall)


def rows(store: str, system: str, cfg: Config, claim: int, why: str) -> list[Measurement]:
    """`cfg.repeats` drains of `store` in claims of `claim`, keyed as the throughput
    suite's `system` row they bound; `why` says whose size that is."""
    drains = [drain(store, cfg.jobs, claim, cfg.tmp) for _ in range(cfg.repeats)]
    settings = {
        "store": store,
        "what": (
            "Engine.claim with start (claim-and-start) and Engine.report_many of the "
            "succeeds, one thread, no worker: no executor, no handler call, no run table"
        ),
        "claim size": why,
        "CPU": "time.thread_time over the drain (user + system of this thread)",
        "garbage collector": "tuned as in `jobfsm worker` (fsm.worker.collector), restored after",
    }
    return [
        Measurement(
            f"throughput.engine.{system}.batched.cpu",
            f"jobfsm's engine path alone, {store}, claims and reports of {claim}: CPU per job",
            "us/job",
            [d.total_us for d in drains],
            settings,
            facts={
                "claim-and-start, us per job": [round(d.claim_us, 1) for d in drains],
                "claim-and-start wall-clock, us per job": [
                    round(d.claim_wall_us, 1) for d in drains
                ],
                "report_many, us per job": [round(d.report_us, 1) for d in drains],
                "drain rate, jobs/s (one thread)": [round(d.jobs_per_s) for d in drains],
            },
            note="the floor of a worker's CPU per job at this claim size",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_path")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--claim", type=int, default=128, help="jobs per claim and per report")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with TemporaryDirectory() as tmp:
        got = [drain(args.store, args.jobs, args.claim, Path(tmp)) for _ in range(args.repeats)]
    for d in got:
        print(f"{args.store}, claims of {args.claim}: {d.total_us:6.1f} us/job "
              f"(claim-and-start {d.claim_us:.1f}, {d.claim_wall_us:.1f} wall-clock; "
              f"report_many {d.report_us:.1f}), "
              f"{d.jobs_per_s:,.0f} jobs/s in one thread")  # fmt: skip
    print(f"median: {statistics.median(d.total_us for d in got):.1f} us/job")


if __name__ == "__main__":
    main()
