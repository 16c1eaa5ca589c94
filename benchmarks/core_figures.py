"""Figures of the throughput suite that need no worker: `decide`'s cost, a recovered job's place.

- `core.decide`: microseconds per `decide` call, the median over the four steps of a
  lifecycle (lease, start, succeed, fail), from `benchmarks.core.bench_decide`; the
  "bare" figure beside it is the record copy and audit entry every transition must
  build anyway; `core.decide_copy` is the plain attrs record copy alone, sampled
  alternately with `decide`, the yardstick of the goal `decide` / copy <= 1.5x.
  CPU-bound and single-threaded, so it is steadier under load than the end-to-end
  rates, but still moves with the machine: for a load-independent count, see
  docs/benchmarks.md (callgrind).
- `core.recovered_place`: on a SQLite store, a job that was running when its owner
  died is recovered while `BACKLOG` newer jobs of the same priority wait; the figure is
  the number of worker claim batches (of `CLAIM` jobs) until it is leased again. 1 means
  the very next batch takes it.
"""

from __future__ import annotations

from benchmarks.core import TARGET_DECIDE_US, bench_decide
from benchmarks.harness import Config, Measurement, Task
from fsm import Engine, FakeClock, Owner, open_store

BACKLOG = 2_500
CLAIM = 32  # the throughput suite's worker slots


def decide_cost(cfg: Config) -> list[Measurement]:
    n, inner = (2_000, 3) if cfg.quick else (20_000, 5)
    runs = [bench_decide(n, inner) for _ in range(cfg.repeats)]
    return [
        Measurement(
            "core.decide",
            "decide, one call (median of lease, start, succeed, fail)",
            "us",
            [r[0] for r in runs],
            {"calls per sample": n, "samples per figure": inner, "target us": TARGET_DECIDE_US},
            facts={"bare record copy + audit entry, us": [round(r[1], 2) for r in runs]},
        ),
        Measurement(
            "core.decide_copy",
            "a plain attrs record copy of the job (`attrs.evolve`), one call",
            "us",
            [r[2] for r in runs],
            {"calls per sample": n, "samples per figure": inner},
            note="sampled alternately with decide, in the same process",
        ),
    ]


def recovered_place(cfg: Config) -> list[Measurement]:
    path = cfg.tmp / "recovered-place.db"
    clock = FakeClock()
    engine = Engine(open_store(f"sqlite:///{path}"), clock=clock)
    try:
        lost = engine.submit("noop", None, retry_safe=True)
        clock.advance(1.0)
        (leased,) = engine.claim(Owner("bench", 1, "dead"), limit=1)
        engine.start(leased.id, leased.fence)
        clock.advance(1.0)
        engine.submit_many([("noop", None, {})] * BACKLOG)
        clock.advance(1.0)
        engine.expire(lost.id, verdict="dead", reason="benchmark: owner killed")
        worker = Owner("bench", 2, "alive")
        batches = 0
        while True:
            batches += 1
            got = engine.claim(worker, limit=CLAIM)
            if not got or any(j.id == lost.id for j in got):
                break
    finally:
        engine.store.close()
    return [
        Measurement(
            "core.recovered_place",
            f"recovered job under a backlog of {BACKLOG:,} newer jobs: claim batches until leased",
            "batches",
            [float(batches)],
            {"store": "sqlite", "claim batch": CLAIM, "priority": "same (default)"},
            note="1 = the next claim batch takes it (it keeps its place in the queue)",
        )
    ]


def plan(cfg: Config) -> list[Task]:
    return [
        Task("core: decide", lambda: decide_cost(cfg)),
        Task("core: a recovered job's place under a backlog", lambda: recovered_place(cfg)),
    ]
