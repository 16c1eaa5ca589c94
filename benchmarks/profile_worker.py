"""Where a worker's CPU goes per no-op job: polling the store vs RabbitMQ wake-ups.

    python -m benchmarks.profile_worker --store postgres --delivery rabbitmq --jobs 5000

Starts one `Worker` in this process on a fresh store, then a child process submits
`--jobs` no-op jobs in batches of 1,000 (with RabbitMQ: one confirmed wake-up each,
as the throughput suite does) and this one waits until all succeeded; it prints:

- the worker's CPU per job (user + system of this process over the drain, from
  /proc, as the throughput suite measures it; the submitter is another process);
- with `--yappi` (the `yappi` profiler, `pip install yappi`, a development tool and
  not a dependency): CPU per job per thread (claim loop, executor threads, the
  RabbitMQ consumer's I/O thread, ...) and the functions with the most own CPU time,
  in microseconds per job. yappi measures CPU time per thread, so other load on the
  machine moves these figures far less than it moves wall-clock rates; its own
  overhead inflates them (compare profiles with each other, not with the plain run);
- the worker's `Engine.claim` (the claim loop) and `Engine.report_many` (the
  reporter): calls, jobs per call, and wall-clock time against the calling thread's
  CPU per job (`benchmarks.calls.Timed`): what the rest was spent waiting on;
- the garbage collector's collections and CPU per job by generation (timed by
  `gc.callbacks`, CPU of the collecting thread); `--tune-collector` first applies
  `fsm.worker.collector.tune_collector`, as `jobfsm worker` does before it serves
  (the in-process worker of this script runs with the interpreter's defaults
  otherwise).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.broker import delete_jobfsm_names
from benchmarks.calls import Timed
from benchmarks.harness import AMQP_URL
from benchmarks.machine import process_cpu, servers_cpu
from benchmarks.noop import engine_for, make_handlers, submit
from benchmarks.services import fresh_store_url
from fsm import Engine, open_store
from fsm.worker import Worker
from fsm.worker.collector import tune_collector

LIMIT_S = 600.0  # longest drain before the profile gives up


def _cpu_self(task: int | None = None) -> float:
    """CPU seconds of this process, or of one of its threads (by native id)."""
    return process_cpu("self" if task is None else f"self/task/{task}")


def _role(name: str) -> str:
    return "executor threads" if name.startswith("jobfsm-thread-") else name


def _threads_cpu() -> dict[str, float]:
    """CPU seconds so far per thread role (executor threads summed), from /proc."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.native_id is None:
            continue
        try:
            used = _cpu_self(t.native_id)
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        out[_role(t.name)] = out.get(_role(t.name), 0.0) + used
    return out


class Collections:
    """The collector's collections and CPU seconds by generation while counting."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.cpu = [0.0, 0.0, 0.0]
        self._began = 0.0

    def start(self) -> None:
        gc.callbacks.append(self._seen)

    def stop(self) -> None:
        if self._seen in gc.callbacks:
            gc.callbacks.remove(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.cpu[generation] += time.thread_time() - self._began

    def report(self, jobs: int) -> None:
        print(f"garbage collector (thresholds {gc.get_threshold()}, "
              f"{gc.get_freeze_count():,} objects frozen):")  # fmt: skip
        for generation, (n, used) in enumerate(zip(self.count, self.cpu, strict=True)):
            print(f"  {used / jobs * 1e6:8.1f}  generation {generation} ({n:,} collections)")
        print(f"  {sum(self.cpu) / jobs * 1e6:8.1f}  in all")


def submitter(url: str, queue: str, delivery: str, jobs: int) -> None:
    """The submitting side, run in a child process: its CPU is not the worker's."""
    engine = engine_for(url, queue)
    publisher: Any = None
    if delivery == "rabbitmq":
        from adapters.rabbitmq import RabbitDelivery

        publisher = RabbitDelivery(AMQP_URL, engine=engine)
        engine.publisher = publisher
    submit(engine, jobs)
    if publisher is not None:
        if not publisher.flush(120.0):
            raise RuntimeError("wake-ups not confirmed within 120 s")
        publisher.close()
    engine.store.close()


def profile(
    store: str, delivery: str, jobs: int, concurrency: int, *, use_yappi: bool, tuned: bool
) -> None:
    yappi: Any = None
    if use_yappi:  # before a worker starts: a missing profiler must not leave one running
        try:
            yappi = importlib.import_module("yappi")
        except ImportError:
            raise SystemExit("--yappi needs the yappi profiler: pip install yappi") from None
    queue = f"prof-{uuid.uuid4().hex[:8]}"
    handlers = make_handlers(queue)
    with TemporaryDirectory() as tmp, fresh_store_url(store, Path(tmp)) as url:
        engine = Engine(open_store(url), kinds={"noop": handlers["noop"].policy})
        # the claim loop's and the reporter's calls, timed on this engine alone
        calls = (Timed(engine, "claim"), Timed(engine, "report_many"))
        chosen: Any = None
        if delivery == "rabbitmq":
            from adapters.rabbitmq import RabbitDelivery

            chosen = RabbitDelivery(AMQP_URL, engine=engine)
        worker = Worker(
            engine, handlers, delivery=chosen, queues=[queue], concurrency=concurrency,
            poll_interval=0.05,
        )  # fmt: skip
        runner = threading.Thread(target=worker.run, name="worker-run", daemon=True)
        runner.start()
        names: dict[int, str] = {}
        collections = Collections()
        try:
            if not worker.wait_started(60.0):
                raise RuntimeError("worker did not start within 60 s")
            if tuned:
                tune_collector()
            collections.start()
            if yappi is not None:
                yappi.set_clock_type("cpu")
                yappi.start(builtins=False, profile_threads=True)
            for timed in calls:
                timed.reset()
            threads0, servers0 = _threads_cpu(), servers_cpu()
            cpu0, began = _cpu_self(), time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.profile_worker", "--submit", url, queue,
                 "--delivery", delivery, "--jobs", str(jobs)],
            )  # fmt: skip
            until = began + LIMIT_S
            while engine.counts().get((queue, "succeeded"), 0) < jobs:
                if time.perf_counter() > until:
                    raise TimeoutError(f"{jobs} jobs not drained within {LIMIT_S:g} s")
                time.sleep(0.01)
            elapsed, cpu = time.perf_counter() - began, _cpu_self() - cpu0
            collections.stop()
            threads, servers = _threads_cpu(), servers_cpu()
            names = {t.ident or 0: t.name for t in threading.enumerate()}
            if child.wait(60) != 0:
                raise RuntimeError(f"the submitting process exited with {child.returncode}")
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            servers["submitting process (submit_many + publishing)"] = (
                usage.ru_utime + usage.ru_stime
            )
        finally:
            collections.stop()
            worker.stop()
            runner.join(60)
            if yappi is not None:
                yappi.stop()
        print(f"{store} + {delivery}: {jobs / elapsed:,.0f} jobs/s, {jobs:,} jobs submitted "
              f"from another process; worker process CPU {cpu / jobs * 1e6:.0f} us/job "
              "(includes the wait-for-done polling of this script)")  # fmt: skip
        print("CPU per job of the servers (shared with other clients) and the submitter (us):")
        for name, used in servers.items():
            print(f"  {(used - servers0.get(name, 0.0)) / jobs * 1e6:8.1f}  {name}")
        print("CPU per job by thread, from /proc (us; 10 ms ticks):")
        spent = {name: used - threads0.get(name, 0.0) for name, used in threads.items()}
        for name, used in sorted(spent.items(), key=lambda kv: -kv[1]):
            if used > 0:
                print(f"  {used / jobs * 1e6:8.1f}  {name}")
        collections.report(jobs)
        print("the worker's engine calls over the drain (wall-clock against the CPU of the "
              "calling thread; the difference is time spent waiting):")  # fmt: skip
        for timed in calls:
            print(f"  {timed.line()}")
        if yappi is not None:
            _print_yappi(jobs, names)
        if chosen is not None:
            chosen.close()
            delete_jobfsm_names([f"jobfsm.{queue}"], keep_dead_letter=True)
        engine.store.close()


def _print_yappi(jobs: int, names: dict[int, str]) -> None:
    import yappi

    print("\nCPU per job by thread (us), executor threads summed:")
    by_name: dict[str, float] = {}
    for t in yappi.get_thread_stats():
        name = names.get(t.tid, t.name)
        name = _role(name)
        by_name[name] = by_name.get(name, 0.0) + t.ttot
    for name, total in sorted(by_name.items(), key=lambda kv: -kv[1]):
        print(f"  {total / jobs * 1e6:8.1f}  {name}")
    print("\nown CPU per job by function (us), top 30:")
    stats = yappi.get_func_stats()
    stats.sort("tsub", "desc")
    for f in list(stats)[:30]:
        where = f"{Path(f.module).name}:{f.lineno} {f.name}"
        print(f"  {f.tsub / jobs * 1e6:8.2f} own {f.ttot / jobs * 1e6:8.2f} total  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_worker")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--delivery", choices=("poll", "rabbitmq"), default="poll")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--yappi", action="store_true", help="per-thread and per-function CPU")
    parser.add_argument(
        "--tune-collector",
        action="store_true",
        help="tune the garbage collector as `jobfsm worker` does (fsm.worker.collector)",
    )
    parser.add_argument("--submit", nargs=2, metavar=("URL", "QUEUE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.submit:
        submitter(args.submit[0], args.submit[1], args.delivery, args.jobs)
        return
    profile(args.store, args.delivery, args.jobs, args.concurrency,
            use_yappi=args.yappi, tuned=args.tune_collector)  # fmt: skip


if __name__ == "__main__":
    main()
