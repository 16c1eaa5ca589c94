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
(/proc), divided by the jobs (`runner.drain`).

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
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import runner
from benchmarks.harness import REPO, version_of
from benchmarks.peers.procrastinate_app import DSN_ENV
from benchmarks.peers.procrastinate_async_app import SLEEP
from benchmarks.peers.procrastinate_async_app import make_app as make_procrastinate
from benchmarks.services import fresh_database
from fsm import AsyncEngine, Engine, open_store
from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

START_TIMEOUT = runner.START_TIMEOUT

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


def _drain(
    workers: runner.Workers, submit: Any, done: Any, jobs: int, warm: int
) -> dict[str, float]:
    """`runner.drain` of one worker process, warmed with one round of `warm` jobs."""
    got = runner.drain(workers, runner.Counted(submit, done, workers, step=0.01), warm, jobs)
    seconds = got.seconds[0]
    return {"jobs_per_s": jobs / seconds, "seconds": seconds, "cpu_ms_per_job": got.cpu_us / 1000}


def jobfsm_run(executor: str, jobs: int, concurrency: int, logs: Path) -> dict[str, float]:
    kind = "io.async" if executor == "asyncio" else "io.thread"
    with fresh_database() as url:
        engine = Engine(open_store(url))
        try:
            with runner.Workers(logs / runner.run_name(f"jobfsm-{executor}"), grace=0) as workers:
                ready = workers.folder / "ready"
                workers.start(*runner.jobfsm_worker(
                    "benchmarks.asyncio_bench:handlers", url, executor=executor,
                    concurrency=concurrency, poll_interval=0.05, log_level="WARNING",
                    ready_file=ready,
                ))  # fmt: skip
                workers.wait(ready.exists, START_TIMEOUT, "the jobfsm worker")
                return _drain(
                    workers,
                    lambda n: engine.submit_many([(kind, None, {})] * n),
                    lambda: _count(url, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                    jobs,
                    concurrency,
                )
        finally:
            engine.store.close()


def procrastinate_run(jobs: int, concurrency: int, logs: Path) -> dict[str, float]:
    app_path = "benchmarks.peers.procrastinate_async_app.app"
    with fresh_database() as url:
        app = make_procrastinate(url).open()
        try:
            app.schema_manager.apply_schema()
            folder = logs / runner.run_name("procrastinate")
            with runner.Workers(folder, {DSN_ENV: url}, grace=0) as workers:
                workers.start("procrastinate", f"--app={app_path}", "worker",
                              f"--concurrency={concurrency}")  # fmt: skip
                task = app.tasks["io_async"]
                listening = (
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                    "current_database() AND query LIKE 'LISTEN %%'"
                )
                workers.wait(lambda: _count(url, listening) >= 1, START_TIMEOUT,
                             "the procrastinate worker to LISTEN")  # fmt: skip
                done = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                return _drain(
                    workers,
                    lambda n: task.batch_defer(*({} for _ in range(n))),
                    lambda: _count(url, done),
                    jobs,
                    concurrency,
                )
        finally:
            app.close()


#: the pool the submit figures in docs/benchmarks.md were measured with (the default is
#: 2 since the connection budget: a burst of submits wants more)
SUBMIT_POOL_MAX = 10


async def _submits(url: str, path: str, n: int) -> dict[str, float]:
    sep = "&" if "?" in url else "?"
    async with await AsyncEngine.open(
        f"{url}{sep}pool_max={SUBMIT_POOL_MAX}", path=path
    ) as aengine:
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
    from fsm.ports import Attempt, Executor
    from fsm.service.identity import Identity
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
    parser.add_argument(
        "--logs", type=Path, default=REPO / "benchmarks" / "results" / "asyncio-logs",
        help="folder of the worker processes' logs",
    )  # fmt: skip
    args = parser.parse_args(argv)
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
            out = procrastinate_run(args.jobs, args.concurrency, args.logs)
        elif system in ("jobfsm-async", "jobfsm-thread"):
            executor = "asyncio" if system == "jobfsm-async" else "thread"
            out = jobfsm_run(executor, args.jobs, args.concurrency, args.logs)
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
