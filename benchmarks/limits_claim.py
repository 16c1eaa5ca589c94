"""What a global limit costs a claim: jobs claimed, started and finished per second with
no limit stored and with limits stored that never bind, in the same run.

    python -m benchmarks.limits_claim --store postgres --jobs 4000 --claimers 4 --repeats 3

Each round submits `--jobs` no-op jobs of one kind to a fresh store, then `--claimers`
threads (each with its own store handle, as worker processes hold) claim-and-start
batches of `--batch` and report each batch succeeded in one write (what a worker
does), until no job is left. The modes alternate within each repeat, their order
rotated from one repeat to the next so that none always runs first:

- `no limits`: the baseline (on PostgreSQL the claim statement still checks that no
  limit is stored);
- `concurrency limit`: `kind:bench` limited to far more than ever run at once, so
  every claim counts the jobs holding a slot (on PostgreSQL ahead of the key's
  advisory lock, which it takes with its writes and commit);
- `concurrency + rate`: the same and a rate far above the claims' pace, so every
  claim also counts (and extends) the key's sliding window; its period is `--period`
  (default 1 s: a round of 2,000 jobs is over before a lease leaves the window, so
  no claim forgets one; a shorter period, e.g. 0.05, makes the window turn over many
  times a round, as it does in a long run);
- `beside capped kind`: the same `--jobs` of the unlimited kind, behind `--capped`
  queued jobs of a kind limited to `CAPPED_SLOTS` concurrent runs whose slots are all
  held (started by another owner that never finishes them in the round), so every
  claim meets jobs a limit holds back first and must reach the unlimited ones behind
  them (docs/flow-control.md: a limited kind never blocks the other kinds of its
  queue). Its rate is that of the unlimited kind's jobs.

It prints the median rate of each mode over the repeats and the ratio of each limited
mode to the baseline of the same run, then the median of each repeat's own ratio (its
rounds ran back to back, so a slow minute of the machine moves both sides) with the
lowest and highest, and the CPU each job cost while the claimers ran:
this process (every claimer thread) and, on PostgreSQL, the server processes serving
the round's own database (the pids `pg_stat_activity` names for it, read from /proc),
so the cost ratio holds on a machine busy with other work where the rate does not. No
limit holds a job of the kind measured back: the figures are the cost of counting, and
of passing the held-back jobs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg

from benchmarks.machine import process_cpu
from benchmarks.services import fresh_store_url
from fsm import Engine, open_store
from fsm.records import Job, Owner

MODES = ("no limits", "concurrency limit", "concurrency + rate", "beside capped kind")
#: limits far above what the run reaches: they count, they never hold a job back
NEVER_BINDING = {"concurrency": 1_000_000, "rate": 10_000_000, "period": 1.0}
#: the concurrency of the capped kind (`beside capped kind`), every slot held all round
CAPPED_SLOTS = 5


def _no_args(job: Job) -> dict[str, Any]:
    return {}


def _hold_capped(setup: Engine, capped: int) -> None:
    """Submit `capped` jobs of kind `capped` ahead of every other, limit the kind to
    CAPPED_SLOTS runs at once and start that many under an owner that never ends them."""
    setup.submit_many([("capped", i, {}) for i in range(capped)])
    setup.set_limit("kind:capped", concurrency=CAPPED_SLOTS, actor="bench", reason="a held cap")
    holder = Owner(f"holder-{uuid.uuid4().hex[:6]}", 999, "inc-holder")
    held = setup.claim(holder, limit=CAPPED_SLOTS, kinds=["capped"], start=_no_args)
    if len(held) != CAPPED_SLOTS:
        raise SystemExit(f"beside capped kind: {len(held)} of {CAPPED_SLOTS} slots held")


def own_backends_cpu(url: str) -> float:
    """CPU seconds so far of the PostgreSQL server processes connected to the database
    of `url` (a fresh one: nothing but this round uses it), this reading's own
    connection left out; 0 for a SQLite URL (the store runs in this process)."""
    if not url.startswith("postgresql"):
        return 0.0
    base = url.split("?", 1)[0]
    with psycopg.connect(base, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        ]
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu(pid)
        except OSError:  # ended meanwhile
            continue
    return total


def one_round(
    store: str,
    mode: str,
    jobs: int,
    claimers: int,
    batch: int,
    *,
    capped: int = 0,
    period: float = NEVER_BINDING["period"],
) -> tuple[float, float]:
    """Jobs per second of one mode on a fresh store of kind `store`, and the CPU
    seconds per job of this process and the round's server processes meanwhile."""
    with fresh_store_url(store) as url:
        setup = Engine(open_store(url))
        try:
            if mode == "beside capped kind":
                _hold_capped(setup, capped)
            setup.submit_many([("bench", i, {}) for i in range(jobs)])
            if mode in MODES[1:3]:
                limits: dict[str, Any] = {"concurrency": NEVER_BINDING["concurrency"]}
                if mode == MODES[2]:
                    limits |= {"rate": NEVER_BINDING["rate"], "period": period}
                setup.set_limit("kind:bench", **limits, actor="bench", reason="cost of counting")
            engines = [Engine(open_store(url)) for _ in range(claimers)]
            done = [0] * claimers
            barrier = threading.Barrier(claimers + 1)

            def claim(n: int) -> None:
                engine = engines[n]
                owner = Owner(f"bench-{uuid.uuid4().hex[:6]}", 1000 + n, f"inc-{n}")
                barrier.wait()
                while True:
                    got = engine.claim(owner, limit=batch, start=_no_args)
                    if not got:
                        return
                    reports = [(j, "succeed", {"fence": j.fence, "result_json": None}) for j in got]
                    engine.report_many(reports)
                    done[n] += len(got)

            threads = [threading.Thread(target=claim, args=(n,)) for n in range(claimers)]
            for t in threads:
                t.start()
            for engine in engines:  # each handle's pool connected before the window
                engine.store.limits()
            cpu = process_cpu() + own_backends_cpu(url)
            barrier.wait()
            started = time.perf_counter()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - started
            cpu = process_cpu() + own_backends_cpu(url) - cpu
            if sum(done) != jobs:
                raise SystemExit(f"{mode}: {sum(done)} of {jobs} jobs finished")
            for engine in engines:
                engine.store.close()
        finally:
            setup.store.close()
    return jobs / seconds, cpu / jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits_claim")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--claimers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--capped", type=int, default=500, help="held-back jobs ahead (beside capped kind)"
    )
    parser.add_argument(
        "--period",
        type=float,
        default=NEVER_BINDING["period"],
        help="the rate window in seconds (concurrency + rate)",
    )
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    costs: dict[str, list[float]] = {m: [] for m in MODES}
    for repeat in range(args.repeats):
        for mode in rotated(repeat):
            rate, cost = one_round(
                args.store,
                mode,
                args.jobs,
                args.claimers,
                args.batch,
                capped=args.capped,
                period=args.period,
            )
            rates[mode].append(rate)
            costs[mode].append(cost)
    print(
        f"{args.store}: {args.jobs} jobs, {args.claimers} claimers, batches of {args.batch}, "
        f"median of {args.repeats}, rate window {args.period:g} s"
    )
    median = {m: statistics.median(r) for m, r in rates.items()}
    cost = {m: statistics.median(c) for m, c in costs.items()}
    for mode in MODES:
        print(f"  {mode:<18} {median[mode]:>9,.0f} jobs/s  {cost[mode] * 1e6:>7.1f} us CPU/job")
    base = median[MODES[0]]
    ratios = ", ".join(f"{m} {median[m] / base:.2f}x" for m in MODES[1:])
    print(f"ratio to no limits (same run): {ratios}")
    # each repeat's own pair: its rounds ran back to back, so a slow minute of the
    # machine moves both sides of the pair, where it moves one median only
    paired = ", ".join(
        f"{m} {spread([r / b for r, b in zip(rates[m], rates[MODES[0]], strict=True)])}"
        for m in MODES[1:]
    )
    print(f"ratio to no limits, median of the repeats' pairs [lowest, highest]: {paired}")
    # the cost ratio: jobs per CPU second, as the rate ratio is jobs per wall second
    spent = ", ".join(f"{m} {cost[MODES[0]] / cost[m]:.2f}x" for m in MODES[1:])
    print(f"jobs per CPU second, ratio to no limits (same run): {spent}")


def rotated(repeat: int) -> list[str]:
    """The modes of repeat `repeat`, rotated so that no mode always runs first."""
    k = repeat % len(MODES)
    return [*MODES[k:], *MODES[:k]]


def spread(ratios: list[float]) -> str:
    """`0.93x [0.88x, 0.97x]`: the median of `ratios`, then the lowest and highest."""
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}x, {max(ratios):.2f}x]"


if __name__ == "__main__":
    main()
