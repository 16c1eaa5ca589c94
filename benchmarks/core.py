"""Cost of the pure core: one `decide`, one lifecycle on the memory store, memory after 100k jobs.

    python -m benchmarks.core            # full: 100,000 jobs for the memory check
    python -m benchmarks.core --quick    # smaller, for a smoke run

Every figure is printed next to a baseline measured in the same run:
- decide vs "bare": the same record copy (`attrs.evolve`) and audit record that a
  transition must build, with no spec lookup, guards, fencing or effects; and vs
  "copy": the plain attrs record copy alone (`attrs.evolve` of the job), the goal's
  yardstick (`decide` / copy <= 1.5x), sampled alternately with `decide` so both see
  the same machine;
- engine lifecycle vs "bare store": the same four row changes as plain dict writes.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable

import attrs

from adapters.memory import MemoryStore
from fsm import Engine, FakeClock, Owner, Policy
from fsm.lifecycle.core import decide
from fsm.records import AuditEntry, Job

OWNER = Owner("bench-host", 1, "bench")
TARGET_DECIDE_US = 10.0
TARGET_DECIDE_OVER_COPY = 1.5


def _medians_us(fns: list[Callable[[], None]], n: int, repeats: int) -> list[float]:
    """Each function's median microseconds per call; the samples of the functions
    alternate (one sample of each in turn, `repeats` times)."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, got in zip(fns, samples, strict=True):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            got.append((time.perf_counter() - start) / n * 1e6)
    return [statistics.median(got) for got in samples]


def bench_decide(n: int, repeats: int) -> tuple[float, float, float]:
    """(decide, bare transition, plain record copy): microseconds per step."""
    policy = Policy.seeded(1)
    now = 1_000.0
    queued = decide(None, "submit", now, policy, id="B1", kind="k", payload_json="{}").job
    leased = decide(queued, "lease", now, policy, owner=OWNER).job
    running = decide(leased, "start", now, policy, fence=1).job
    steps = [
        (queued, "lease", {"owner": OWNER}),
        (leased, "start", {"fence": 1}),
        (running, "succeed", {"fence": 1, "result_json": "1"}),
        (running, "fail", {"fence": 1, "error": "boom"}),
    ]

    def one_round() -> None:
        for job, event, args in steps:
            decide(job, event, now, policy, **args)

    def bare_round() -> None:
        for job, event, _args in steps:
            new = attrs.evolve(job, state="x", version=job.version + 1, updated_at=now)
            AuditEntry(
                job_id=new.id,
                version=new.version,
                at=now,
                event=event,
                from_state=job.state,
                to_state="x",
                fence=new.fence,
                attempt=new.attempt,
            )

    def copy_round() -> None:
        for job, _event, _args in steps:
            attrs.evolve(job, state="x", version=job.version + 1, updated_at=now)

    ours, bare, copy = _medians_us([one_round, bare_round, copy_round], n, repeats)
    return ours / len(steps), bare / len(steps), copy / len(steps)


def bench_lifecycle(n: int) -> tuple[float, float]:
    clock = FakeClock()
    engine = Engine(MemoryStore(), clock=clock, policy=Policy.seeded(2))
    start = time.perf_counter()
    for _ in range(n):
        job = engine.submit("noop", None)
        (leased,) = engine.claim(OWNER, limit=1)
        engine.start(leased.id, leased.fence)
        engine.succeed(job.id, leased.fence)
    ours = n / (time.perf_counter() - start)

    rows: dict[str, dict[str, object]] = {}
    start = time.perf_counter()
    for i in range(n):
        key = str(i)
        rows[key] = {"state": "queued", "version": 1, "fence": 0}
        rows[key] = {**rows[key], "state": "leased", "version": 2, "fence": 1}
        rows[key] = {**rows[key], "state": "running", "version": 3}
        rows[key] = {**rows[key], "state": "succeeded", "version": 4}
    bare = n / (time.perf_counter() - start)
    return ours, bare


def bench_memory(total: int, batch: int) -> tuple[int, int, int]:
    """Run `total` jobs to completion in batches, pruning as we go; return
    (bytes retained after the first batch, bytes retained at the end, live Job objects)."""
    clock = FakeClock()
    engine = Engine(MemoryStore(), clock=clock, policy=Policy.seeded(3))
    engine.policy.limits.retention["succeeded"] = 0.0  # type: ignore[index]

    def run_batch() -> None:
        for _ in range(batch):
            engine.submit("noop", {"i": 1})
        while leased := engine.claim(OWNER, limit=100):
            for job in leased:
                engine.start(job.id, job.fence)
                engine.succeed(job.id, job.fence, result=None)
        clock.advance(1)
        engine.prune(limit=1000)

    tracemalloc.start()
    run_batch()
    gc.collect()
    after_first, _ = tracemalloc.get_traced_memory()
    for _ in range(total // batch - 1):
        run_batch()
    gc.collect()
    at_end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    live_jobs = sum(1 for o in gc.get_objects() if isinstance(o, Job))
    return after_first, at_end, live_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run")
    args = parser.parse_args()
    n, repeats, lifecycles, total = (
        (2_000, 3, 2_000, 10_000) if args.quick else (20_000, 7, 20_000, 100_000)
    )

    ours, bare, copy = bench_decide(n, repeats)
    print(f"decide: median {ours:.1f} us per transition (target <= {TARGET_DECIDE_US:.0f} us)")
    print(f"  bare record copy + audit record: {bare:.1f} us; decide / bare = {ours / bare:.2f}x")
    print(
        f"  plain record copy: {copy:.1f} us; decide / copy = {ours / copy:.2f}x "
        f"(target <= {TARGET_DECIDE_OVER_COPY}x)"
    )

    ours_lc, bare_lc = bench_lifecycle(lifecycles)
    print(f"memory-store lifecycles (submit, lease, start, succeed): {ours_lc:,.0f}/s")
    print(f"  bare dict writes: {bare_lc:,.0f}/s; engine / bare = {ours_lc / bare_lc:.3f}")

    first, end, live = bench_memory(total, 1_000)
    growth = end - first
    print(
        f"memory after {total:,} jobs run and pruned: {end / 1024:.0f} KiB traced "
        f"(after the first 1,000: {first / 1024:.0f} KiB; growth {growth / 1024:+.0f} KiB); "
        f"live Job objects: {live}"
    )


if __name__ == "__main__":
    main()
