"""Worker benchmarks: recovery latency after SIGKILL, and no-op throughput.

    python benchmarks/worker.py [--stores sqlite,postgres] [--jobs 8000] [--runs 5]

Every figure is printed with a ratio against a baseline measured in the same run:

- recovery: time from SIGKILL of a worker to the re-run of its job by another
  worker, p50 over `--runs`; baseline = the lease TTL, which is what recovery
  would take if death could not be confirmed.
- throughput: no-op jobs per second drained by 1 and by 4 `jobfsm worker`
  processes; baseline = one process leasing, starting and completing the same
  jobs through the Engine's batched calls with no worker around them (the
  engine-and-store ceiling for one process).

The machine has 2 cores and other work runs beside it: figures move between runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.harness import wait_for  # noqa: E402
from benchmarks.noop import submit  # noqa: E402
from benchmarks.runner import Workers, jobfsm_worker  # noqa: E402
from benchmarks.services import fresh_store_url  # noqa: E402
from fsm import Engine, open_store  # noqa: E402
from fsm.service.identity import HOST_ENV, Identity  # noqa: E402
from fsm.worker.context import Context  # noqa: E402
from fsm.worker.handlers import Handlers  # noqa: E402

handlers = Handlers()


@handlers.handler("noop", queue="bench")
def noop(ctx: Context) -> None:
    return None


@handlers.handler("hold", queue="bench")
def hold(ctx: Context) -> None:
    """Runs until cancelled on attempt 1 (to be killed); returns at once afterwards."""
    folder = Path(ctx.payload["dir"])
    (folder / f"{ctx.attempt}.{os.getpid()}").touch()
    while ctx.attempt == 1 and not ctx.cancelled.wait(0.05):
        pass


def engine_for(url: str) -> Engine:
    return Engine(open_store(url), kinds={k: s.policy for k, s in handlers.items()})


def start(
    workers: Workers, url: str, *, host: str | None = None, ttl: float = 30.0, **opts: Any
) -> tuple[Any, Path]:
    """A `jobfsm worker` of this app on `url` (its host named, or the real one): the
    process and the file it creates once it has run its start-up sweep and claims."""
    ready = workers.folder / f"ready-{workers.started + 1}"
    argv = jobfsm_worker(
        "benchmarks.worker:handlers", url, queues="bench", lease_ttl=ttl,
        heartbeat=min(5.0, ttl / 3), log_level="WARNING", ready_file=ready, **opts,
    )  # fmt: skip
    return workers.start(*argv, env={HOST_ENV: host}), ready


# --- recovery latency --------------------------------------------------------------------


def recovery(kind: str, tmp: Path, runs: int, cross_host: bool) -> list[float]:
    """Seconds from SIGKILL of the owner to the start of the re-run, per run."""
    out = []
    for _ in range(runs):
        with fresh_store_url(kind, tmp) as url:
            engine = engine_for(url)
            marks = Path(tempfile.mkdtemp(dir=tmp))
            try:
                with Workers(marks / "logs", grace=0) as workers:
                    job = engine.submit("hold", {"dir": str(marks)})
                    a, _ = start(workers, url, host="bench-a" if cross_host else None)
                    workers.wait(lambda m=marks: list(m.glob("1.*")), 60, "the first attempt")
                    _, b_ready = start(workers, url, host="bench-b" if cross_host else None)
                    workers.wait(b_ready.exists, 60, "worker B")  # B is up and sweeping
                    killed = time.time()
                    a.send_signal(signal.SIGKILL)
                    a.wait(10)
                    wait_for(lambda m=marks: list(m.glob("2.*")), 60, "the second attempt")
                    out.append(next(iter(marks.glob("2.*"))).stat().st_mtime - killed)
                    assert engine.get(job.id).recoveries == 1
            finally:
                engine.store.close()
    return out


# --- throughput --------------------------------------------------------------------------


def drained(engine: Engine, n: int) -> bool:
    return engine.counts().get(("bench", "succeeded"), 0) >= n


def baseline(kind: str, tmp: Path, n: int, batch: int = 64) -> float:
    """Jobs/s: one process claims, starts and completes in batches, no worker around it."""
    with fresh_store_url(kind, tmp) as url:
        engine = engine_for(url)
        try:
            submit(engine, n)
            owner = Identity().owner
            began = time.perf_counter()
            done = 0
            while done < n:
                jobs = engine.claim(owner, ("bench",), limit=batch)
                started = engine.report_many([(j, "start", {"fence": j.fence}) for j in jobs])
                ok = engine.report_many(
                    [(j, "succeed", {"fence": j.fence, "result_json": "null"}) for j in started]  # type: ignore[union-attr]
                )
                done += len(ok)
            return n / (time.perf_counter() - began)
        finally:
            engine.store.close()


def throughput(kind: str, tmp: Path, n: int, processes: int, concurrency: int) -> float:
    """Jobs/s drained by `processes` worker processes already up when the jobs arrive."""
    with fresh_store_url(kind, tmp) as url:
        engine = engine_for(url)
        try:
            with Workers(Path(tempfile.mkdtemp(dir=tmp)), grace=0) as workers:
                started = [
                    start(workers, url, concurrency=concurrency, poll_interval=0.05)[1]
                    for _ in range(processes)
                ]
                for ready in started:
                    workers.wait(ready.exists, 60, "a worker's start")  # up and polling
                submit(engine, n)
                began = time.perf_counter()
                workers.wait(lambda: drained(engine, n), 600, f"{n} jobs drained", step=0.05)
                return n / (time.perf_counter() - began)
        finally:
            engine.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for kind in args.stores.split(","):
            print(f"== {kind} ==")
            ttl = 30.0
            same = recovery(kind, tmp, args.runs, cross_host=False)
            p50 = statistics.median(same)
            print(
                f"recovery after SIGKILL, same host: p50 {p50:.2f}s max {max(same):.2f}s "
                f"over {len(same)} runs; baseline lease TTL {ttl:.0f}s; ratio {p50 / ttl:.3f}"
            )
            if kind == "postgres":
                cross = recovery(kind, tmp, args.runs, cross_host=True)
                p50 = statistics.median(cross)
                print(
                    f"recovery after SIGKILL, other host (liveness lock): p50 {p50:.2f}s "
                    f"max {max(cross):.2f}s; baseline lease TTL {ttl:.0f}s; "
                    f"ratio {p50 / ttl:.3f}"
                )
            base = baseline(kind, tmp, args.jobs)
            print(f"baseline: engine batches in one process, no worker: {base:,.0f} jobs/s")
            one = throughput(kind, tmp, args.jobs, 1, args.concurrency)
            print(f"1 worker process:  {one:,.0f} jobs/s; ratio to baseline {one / base:.2f}")
            four = throughput(kind, tmp, args.jobs, 4, args.concurrency)
            print(
                f"4 worker processes: {four:,.0f} jobs/s ({four / 4:,.0f} per process); "
                f"ratio to 1 process {four / one:.2f}; to baseline {four / base:.2f}"
            )


if __name__ == "__main__":
    main()
