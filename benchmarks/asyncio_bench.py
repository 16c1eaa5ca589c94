"""I/O-bound jobs through one worker process on PostgreSQL: jobfsm's asyncio executor,
procrastinate's async worker at the same concurrency, and jobfsm's thread executor.

    python -m benchmarks.asyncio_bench --jobs 10000 --concurrency 200
    python -m benchmarks.asyncio_bench --jobs 2000 --systems jobfsm-async,procrastinate
    python -m benchmarks.asyncio_bench --submits 2000    # AsyncEngine.submit, both paths
    python -m benchmarks.asyncio_bench --attempts 4000   # the executors alone, in-process

Each job waits 0.05 s (`await asyncio.sleep(0.05)`; the thread executor's handler
`time.sleep(0.05)`), so the floor is jobs * 0.05 / concurrency seconds. Every
system gets a fresh database, one worker process started and warm (one round of
`concurrency` jobs done) before the clock starts; the clock runs from the first
enqueue (one batch: `submit_many`, `batch_defer`) until the system's own table
counts every job succeeded (polled every 10 ms from another connection). CPU per
job is the worker process's user + system time over the timed part
(/proc/<pid>/stat), divided by the jobs.

`--submits N`: N `AsyncEngine.submit` calls at once (`asyncio.gather`, distinct
idempotency keys) on a fresh database, through the store's asyncio twin (psycopg's
async pool, `path="async"`) and through the blocking store on threads
(`path="threads"`, `max_threads` 8); CPU per submit is this process's CPU time
over the timed part, divided by N. Each path is warmed with 200 submits first;
then 300 `get`s and 300 `submit`s are timed one at a time (wall and CPU per call).

`--attempts N`: the executors alone, in this process, no store: N attempts of the
same handlers through the asyncio executor and the thread executor with
`--concurrency` slots, the free slots refilled together as a worker's claim does
(after each wake-up, every attempt that ended meanwhile); CPU per attempt is
this process's CPU time over the timed part, divided by N (one warm-up round).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks._services import fresh_database
from benchmarks.harness import REPO, version_of, wait_for
from benchmarks.machine import process_cpu
from benchmarks.peers.procrastinate_app import DSN_ENV
from benchmarks.peers.procrastinate_async_app import SLEEP
from benchmarks.peers.procrastinate_async_app import make_app as make_procrastinate
from fsm import AsyncEngine, Engine, open_store
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

START_TIMEOUT = 90.0

handlers = Handlers()


@handlers.handler("io.async")
async def io_async(ctx: Context) -> None:
    await asyncio.sleep(SLEEP)


@handlers.handler("io.thread")
def io_thread(ctx: Context) -> None:
    time.sleep(SLEEP)


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def _time(
    url: str, proc: subprocess.Popen[bytes], jobs: int, done_sql: str, enqueue: Any
) -> dict[str, float]:
    def finished() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}")
        return _count(url, done_sql) >= jobs

    cpu0 = process_cpu(proc.pid)
    began = time.perf_counter()
    enqueue()
    wait_for(finished, 60 + jobs * SLEEP, f"{jobs} jobs", step=0.01)
    took = time.perf_counter() - began
    cpu = process_cpu(proc.pid) - cpu0
    return {"jobs_per_s": jobs / took, "seconds": took, "cpu_ms_per_job": 1000 * cpu / jobs}


def jobfsm_run(executor: str, jobs: int, concurrency: int, log: Path) -> dict[str, float]:
    kind = "io.async" if executor == "asyncio" else "io.thread"
    with fresh_database() as url:
        engine = Engine(open_store(url))
        try:
            ready = log.with_suffix(f".{executor}.ready")
            argv = [
                "fsm.cli", "worker", "--app", "benchmarks.asyncio_bench:handlers",
                "--store", url, "--executor", executor, "--concurrency", str(concurrency),
                "--poll-interval", "0.05", "--log-level", "WARNING", "--ready-file", str(ready),
            ]  # fmt: skip
            proc = _start(argv, {}, log)
            try:
                wait_for(ready.exists, START_TIMEOUT, "the jobfsm worker")
                engine.submit_many([(kind, None, {})] * concurrency)  # warm-up round
                done = "SELECT count(*) FROM jobs WHERE state = 'succeeded'"
                wait_for(lambda: _count(url, done) >= concurrency, START_TIMEOUT, "warm-up")
                return _time(
                    url,
                    proc,
                    jobs,
                    f"SELECT count(*) - {concurrency} FROM jobs WHERE state = 'succeeded'",
                    lambda: engine.submit_many([(kind, None, {})] * jobs),
                )
            finally:
                _stop(proc)
        finally:
            engine.store.close()


def procrastinate_run(jobs: int, concurrency: int, log: Path) -> dict[str, float]:
    app_path = "benchmarks.peers.procrastinate_async_app.app"
    with fresh_database() as url:
        app = make_procrastinate(url).open()
        try:
            app.schema_manager.apply_schema()
            argv = ["procrastinate", f"--app={app_path}", "worker", f"--concurrency={concurrency}"]
            proc = _start(argv, {DSN_ENV: url}, log)
            try:
                task = app.tasks["io_async"]

                def listening() -> bool:
                    return (
                        _count(
                            url,
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND query LIKE 'LISTEN %%'",
                        )
                        >= 1
                    )

                wait_for(listening, START_TIMEOUT, "the procrastinate worker to LISTEN")
                task.batch_defer(*({} for _ in range(concurrency)))
                done = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                wait_for(lambda: _count(url, done) >= concurrency, START_TIMEOUT, "warm-up")
                return _time(
                    url,
                    proc,
                    jobs,
                    f"SELECT count(*) - {concurrency} FROM procrastinate_jobs "
                    "WHERE status = 'succeeded'",
                    lambda: task.batch_defer(*({} for _ in range(jobs))),
                )
            finally:
                _stop(proc)
        finally:
            app.close()


async def _submits(url: str, path: str, n: int) -> dict[str, float]:
    async with await AsyncEngine.open(url, path=path) as aengine:
        await asyncio.gather(*(aengine.submit("io.async", None) for _ in range(200)))  # warm
        cpu0, began = time.process_time(), time.perf_counter()
        jobs = await asyncio.gather(
            *(aengine.submit("io.async", i, idempotency_key=f"{path}-{i}") for i in range(n))
        )
        took, cpu = time.perf_counter() - began, time.process_time() - cpu0
        one: dict[str, float] = {}
        for what, call in (
            ("get", lambda: aengine.get(jobs[0].id)),
            ("submit", lambda: aengine.submit("io.async", None)),
        ):
            cpu1, t1 = time.process_time(), time.perf_counter()
            for _ in range(ONE_AT_A_TIME):
                await call()
            one[f"{what}_us"] = 1e6 * (time.perf_counter() - t1) / ONE_AT_A_TIME
            one[f"{what}_cpu_us"] = 1e6 * (time.process_time() - cpu1) / ONE_AT_A_TIME
    assert len({j.id for j in jobs}) == n
    return {"per_s": n / took, "seconds": took, "cpu_ms": 1000 * cpu / n, **one}


def submit_runs(n: int) -> None:
    """AsyncEngine.submit throughput and CPU per submit, async pool against threads."""
    print(f"{n} AsyncEngine.submit calls at once (asyncio.gather), PostgreSQL")
    for path in ("async", "threads"):
        with fresh_database() as url:
            out = asyncio.run(_submits(url, path, n))
        print(
            f"path={path:8} {out['per_s']:8.0f} submits/s  {out['seconds']:6.2f} s  "
            f"{out['cpu_ms']:.2f} ms CPU/submit; one at a time: "
            f"get {out['get_us']:.0f} us ({out['get_cpu_us']:.0f} us CPU), "
            f"submit {out['submit_us']:.0f} us ({out['submit_cpu_us']:.0f} us CPU)",
            flush=True,
        )


def _executor_run(name: str, n: int, slots: int) -> dict[str, float]:
    import itertools
    import threading

    from adapters.asyncio_executor import AsyncioExecutor
    from adapters.executors import ThreadExecutor
    from adapters.memory import MemoryStore
    from fsm.owner import Identity
    from fsm.ports import Attempt, Executor
    from fsm.worker.context import handler_path, run_attempt, run_attempt_async

    engine = Engine(MemoryStore())
    engine.submit_many([("io", None, {})] * (n + slots))
    jobs = engine.claim(Identity().owner, limit=n + slots)
    handler = io_async if name == "asyncio" else io_thread
    ended = threading.Semaphore(0)

    def attempt(job: Any) -> Attempt:
        token = threading.Event()
        ctx = Context(job, token)
        arun = (lambda: run_attempt_async(handler, ctx)) if name == "asyncio" else None
        run = lambda: run_attempt(handler, ctx)  # noqa: E731
        return Attempt(job, 60.0, handler_path(handler), run, token, arun=arun)

    def feed(executor: Executor, batch: list[Any]) -> None:
        """Fill every free slot at once, as a worker's claim does, until all ended."""
        waiting, free, finished = iter(batch), slots, 0
        while finished < len(batch):
            for job in itertools.islice(waiting, free):
                executor.submit(attempt(job), lambda a, o: ended.release())
            ended.acquire()
            free = 1
            while ended.acquire(blocking=False):
                free += 1
            finished += free

    executor: Executor = AsyncioExecutor() if name == "asyncio" else ThreadExecutor()
    executor.start(slots)
    try:
        feed(executor, jobs[:slots])  # warm-up round
        cpu0, began = time.process_time(), time.perf_counter()
        feed(executor, jobs[slots:])
        took, cpu = time.perf_counter() - began, time.process_time() - cpu0
    finally:
        executor.shutdown(5.0)
    return {"per_s": n / took, "seconds": took, "cpu_us": 1e6 * cpu / n}


def executor_runs(n: int, slots: int) -> None:
    """CPU per attempt of the asyncio and the thread executor, without a store."""
    print(f"{n} attempts of {SLEEP}s through each executor alone, {slots} slots, in-process")
    for name in ("asyncio", "thread"):
        out = _executor_run(name, n, slots)
        print(
            f"{name:8} {out['per_s']:8.0f} attempts/s  {out['seconds']:6.2f} s  "
            f"{out['cpu_us']:.0f} us CPU/attempt",
            flush=True,
        )


SYSTEMS = ("jobfsm-async", "procrastinate", "jobfsm-thread")
#: `--submits`: calls of `get` and of `submit` timed one at a time, after the batch
ONE_AT_A_TIME = 300


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument(
        "--submits", type=int, default=0, help="measure AsyncEngine.submit instead (N calls)"
    )
    parser.add_argument(
        "--attempts", type=int, default=0, help="measure the executors alone (N attempts)"
    )
    parser.add_argument("--log", type=Path, default=REPO / "benchmarks" / "results" / "asyncio.log")
    args = parser.parse_args(argv)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    if args.submits:
        submit_runs(args.submits)
        return
    if args.attempts:
        executor_runs(args.attempts, args.concurrency)
        return
    print(
        f"{args.jobs} jobs of {SLEEP}s, concurrency {args.concurrency}, one worker process, "
        f"PostgreSQL; procrastinate {version_of('procrastinate')}; "
        f"floor {args.jobs * SLEEP / args.concurrency:.1f}s"
    )
    rates: dict[str, float] = {}
    for system in args.systems.split(","):
        if system == "procrastinate":
            out = procrastinate_run(args.jobs, args.concurrency, args.log)
        elif system in ("jobfsm-async", "jobfsm-thread"):
            executor = "asyncio" if system == "jobfsm-async" else "thread"
            out = jobfsm_run(executor, args.jobs, args.concurrency, args.log)
        else:
            raise SystemExit(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}")
        rates[system] = out["jobs_per_s"]
        print(
            f"{system:15} {out['jobs_per_s']:8.0f} jobs/s  {out['seconds']:6.2f} s  "
            f"{out['cpu_ms_per_job']:.2f} ms CPU/job",
            flush=True,
        )
    if "jobfsm-async" in rates and "procrastinate" in rates:
        print(
            f"jobfsm async / procrastinate: {rates['jobfsm-async'] / rates['procrastinate']:.2f}x"
        )


if __name__ == "__main__":
    main()
