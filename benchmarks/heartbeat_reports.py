"""Jobs that run past a heartbeat, against the same jobs that do not, in the same run.

    python -m benchmarks.heartbeat_reports [--stores sqlite,postgres] [--jobs 3000]
        [--seconds 0.3] [--slots 256] [--rounds 2]

A heartbeat renews every held lease with a new version, so a job that runs past one
is reported on a record that moved since it was claimed. This measures what that
costs the worker and the store. A worker runs in this process (thread executor,
`--slots` threads) and drains `--jobs` jobs that each sleep `--seconds`, twice per
round and store, back to back:

- baseline: the heartbeat interval is longer than the whole drain, so no lease is
  renewed and every report is decided on the record as claimed;
- past heartbeats: the interval is a third of a job, so every job runs past two or
  three renewals.

Each row gives jobs/s, this process's CPU per job (user + system: the worker's
threads, and this script's poll for the end every 0.1 s), the store writes of
reports per job (`Store.apply` calls: one per batch, one per report written alone)
and the leases renewed per job; the ratio line divides the second row by the first.
Jobs are submitted before the worker starts; the clock runs from its start to the
last success. To measure an older commit the same way, unpack it and put it first on
the path: `git archive <commit> | tar -x -C /tmp/base` and
`PYTHONPATH=/tmp/base python -m benchmarks.heartbeat_reports` from /tmp/base.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.services import fresh_store_url
from fsm import Engine, KindPolicy, Worker, open_store
from fsm.policies import LeasePolicy, Policy
from fsm.service.identity import Identity
from fsm.worker.context import Context

BATCH = 1_000  # jobs per submit_many
DRAIN_LIMIT = 600.0  # seconds one drain may take before the run fails
START_LIMIT = 60.0  # seconds the worker may take to start
QUIET_HEARTBEAT = 3_600.0  # the baseline's heartbeat interval: never within a drain


class Counted:
    """Counts the real store's `apply` and `renew` calls (each one transaction)."""

    def __init__(self, engine: Engine) -> None:
        self.applies = 0
        self.renewed = 0
        store: Any = engine.store
        apply, renew = store.apply, store.renew

        def counted_apply(decisions: Sequence[Any]) -> Any:
            self.applies += 1
            return apply(decisions)

        def counted_renew(request: Any) -> Any:
            out = renew(request)
            self.renewed += len(out)
            return out

        store.apply, store.renew = counted_apply, counted_renew


def drain(url: str, jobs: int, seconds: float, slots: int, heartbeat: float) -> dict[str, float]:
    """One drain of `jobs` sleeping jobs with heartbeats every `heartbeat` seconds."""
    policy = Policy(lease=LeasePolicy(ttl=max(30.0, 3 * heartbeat), heartbeat_interval=heartbeat))
    engine = Engine(open_store(url), policy=policy, kinds={"sleep": KindPolicy()})
    try:
        for start in range(0, jobs, BATCH):
            engine.submit_many([("sleep", None, {})] * min(BATCH, jobs - start))
        counted = Counted(engine)

        def sleep(ctx: Context) -> None:
            time.sleep(seconds)

        worker = Worker(
            engine,
            {"sleep": sleep},
            concurrency=slots,
            poll_interval=0.05,
            identity=Identity(),
            install_signals=False,
        )
        runner = threading.Thread(target=worker.run, name="worker-run", daemon=True)
        began, cpu = time.perf_counter(), time.process_time()
        runner.start()
        try:
            if not worker.wait_started(START_LIMIT):
                raise RuntimeError(f"the worker did not start within {START_LIMIT:g} s")
            until = began + DRAIN_LIMIT
            while engine.counts().get(("default", "succeeded"), 0) < jobs:
                if time.perf_counter() > until:
                    raise TimeoutError(f"{jobs} jobs not drained within {DRAIN_LIMIT:g} s")
                time.sleep(0.1)
            elapsed, used = time.perf_counter() - began, time.process_time() - cpu
        finally:
            worker.stop(now=True)
            runner.join(30)
        return {
            "rate": jobs / elapsed,
            "cpu": used / jobs * 1e6,
            "writes": counted.applies / jobs,
            "renewed": counted.renewed / jobs,
        }
    finally:
        engine.store.close()


def _row(name: str, m: dict[str, float]) -> str:
    return (
        f"  {name:<16} {m['rate']:>8,.0f} jobs/s {m['cpu']:>7,.0f} us/job CPU "
        f"{m['writes']:>6.2f} report writes/job {m['renewed']:>6.2f} renewals/job"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.heartbeat_reports", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--seconds", type=float, default=0.3, help="each job sleeps this long")
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    print(
        f"{args.jobs:,} jobs of {args.seconds:g} s, {args.slots} slots; heartbeat every "
        f"{args.seconds / 3:g} s past heartbeats, none in the baseline"
    )
    for store in stores:
        for n in range(1, args.rounds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                figures = []
                for heartbeat in (QUIET_HEARTBEAT, args.seconds / 3):
                    with fresh_store_url(store, Path(tmp)) as url:
                        figures.append(drain(url, args.jobs, args.seconds, args.slots, heartbeat))
            base, past = figures
            print(f"{store}, round {n}:")
            print(_row("baseline", base))
            print(_row("past heartbeats", past))
            print(
                f"  ratio            {past['rate'] / base['rate']:>8.2f}x rate  "
                f"{past['cpu'] / base['cpu']:>7.2f}x CPU per job  "
                f"{past['writes'] / max(base['writes'], 1e-9):>6.2f}x report writes"
            )


if __name__ == "__main__":
    main()
