"""End-to-end throughput of jobfsm: enqueue no-op jobs, drain them with worker processes.

The method is the one every system in the comparison follows (benchmarks/peers/ runs
the peers and the raw baselines the same way):

- enqueue rate: no worker running; one client enqueues `cfg.jobs` jobs one at a time
  (`Engine.submit`: one store transaction each) and, separately, in batches of 1,000
  (`Engine.submit_many`). With RabbitMQ delivery the clock stops only once every
  wake-up is confirmed by the broker.
- process rate: `jobfsm worker` processes are started and ready (start-up sweep done,
  first claim answered) before the first job exists, then warmed up the way every
  peer is (one job per slot, run and drained before the clock starts); then the jobs
  are submitted in batches of 1,000 and the clock runs from the first submit until
  the store counts all of them succeeded. The worker processes' CPU time (user +
  system, from /proc/<pid>/stat) over that window, divided by the jobs, is the
  worker CPU per job: less sensitive to other load on the machine than the rate.
- jobfsm at its best, as each peer is: the 1- and 4-process rows sweep the threads
  per process (`THREADS`; a quick run tries `CONCURRENCY` only) and report the shape
  with the highest median, its label naming it and its facts every shape's median;
  the worker CPU per job rows are that shape's. More slots make bigger claim
  batches, so with 1 process the batched raw baseline (`raw_batched`) runs beside it
  in the winner's claim size: the comparison stays like for like. So does the
  engine path alone (`engine_path`: the same claims and reports in one thread, no
  worker), the floor that row's worker CPU per job cannot go below.
- equal slots: the same with 1 process x 4 threads, the 4 job slots the peers'
  equal-slot rows get.

Stores are fresh per run (a new SQLite file, a new PostgreSQL database); SQLite keeps
its default `synchronous=FULL`.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import broker, engine_path, runner
from benchmarks.harness import AMQP_URL, Config, Measurement, Task, repeat
from benchmarks.machine import Meter, machine_fact
from benchmarks.noop import APP, BATCH, QUEUE_ENV, engine_for, submit
from benchmarks.peers import raw_batched, sweep
from benchmarks.services import fresh_store_url

CONCURRENCY = 32  # thread slots per worker process (the quick run's only shape)
THREADS = (32, 64, 128, 256)  # threads per process swept for the 1- and 4-process rows
POLL_INTERVAL = 0.05  # seconds; PostgreSQL is also woken by LISTEN/NOTIFY
EQUAL_SLOTS = 4  # job slots of the equal-slot rows (1 process x 4 threads)
AUDIT = (
    "an audit row per transition, written in its transaction: 4 per job "
    "(submit, lease, start, succeed)"
)
DURABILITY = {
    "sqlite": "committed (fsync, synchronous=FULL) before submit returns",
    "postgres": "committed (synchronous_commit on) before submit returns",
    "rabbitmq": "committed to PostgreSQL before submit returns; wake-ups confirmed by the broker",
}

STORES = {"sqlite": "sqlite", "postgres": "postgres", "rabbitmq": "postgres"}
LABELS = {
    "sqlite": "jobfsm, SQLite store (synchronous=FULL)",
    "postgres": "jobfsm, PostgreSQL store",
    "rabbitmq": "jobfsm, PostgreSQL store + RabbitMQ delivery",
}


class Setup:
    """One system under test: a fresh store, a unique queue, optional RabbitMQ wake-ups,
    and its `jobfsm worker` processes (`runner.Workers`, killed at once on close)."""

    def __init__(self, system: str, url: str, tmp: Path) -> None:
        self.system = system
        self.url = url
        self.queue = f"bench-{uuid.uuid4().hex[:10]}"
        self.engine = engine_for(url, self.queue)
        self.workers = runner.Workers(tmp / self.queue, {QUEUE_ENV: self.queue}, grace=0)
        self.delivery: Any = None
        self.dead_letter_existed = True
        if system == "rabbitmq":
            from adapters.rabbitmq import RabbitDelivery

            self.dead_letter_existed = broker.queue_depth(broker.DEAD_LETTER) is not None
            self.delivery = RabbitDelivery(AMQP_URL, engine=self.engine)
            self.engine.publisher = self.delivery
        self.counted = runner.Counted(self.submit_batches, self.succeeded, self.workers)

    def start_worker(self, concurrency: int = CONCURRENCY) -> None:
        """One more worker process, started and ready (start-up sweep done, first claim
        answered) before this returns."""
        ready = self.workers.folder / f"ready-{self.workers.started + 1}"
        options: dict[str, object] = {"queues": self.queue, "log_level": "WARNING"}
        options |= {"concurrency": concurrency, "poll_interval": POLL_INTERVAL}
        options["ready_file"] = ready
        if self.delivery is not None:
            options["delivery"] = AMQP_URL
        self.workers.start(*runner.jobfsm_worker(APP, self.url, **options))
        self.workers.wait(ready.exists, runner.START_TIMEOUT, "worker start")

    def submit_one_by_one(self, n: int) -> None:
        for _ in range(n):
            self.engine.submit("noop")
        self.flush()

    def submit_batches(self, n: int) -> None:
        submit(self.engine, n)
        self.flush()

    def flush(self) -> None:
        if self.delivery is not None and not self.delivery.flush(60.0):
            raise RuntimeError("RabbitMQ wake-ups were not confirmed within 60 s")

    def succeeded(self) -> int:
        return self.engine.counts().get((self.queue, "succeeded"), 0)

    def close(self) -> None:
        self.workers.stop()
        if self.delivery is not None:
            self.delivery.close()
            broker.delete_jobfsm_names([f"jobfsm.{self.queue}"], self.dead_letter_existed)
        self.engine.store.close()


@contextmanager
def setup(system: str, tmp: Path) -> Iterator[Setup]:
    with fresh_store_url(STORES[system], tmp) as url:
        s = Setup(system, url, tmp)
        try:
            yield s
        finally:
            s.close()


def enqueue_rate(system: str, cfg: Config, batched: bool) -> float:
    with setup(system, cfg.tmp) as s:
        began = time.perf_counter()
        (s.submit_batches if batched else s.submit_one_by_one)(cfg.jobs)
        return cfg.jobs / (time.perf_counter() - began)


def process_rate(
    system: str,
    cfg: Config,
    workers: int,
    concurrency: int = CONCURRENCY,
    *,
    meter: Meter | None = None,
) -> tuple[float, float, list[float]]:
    """(jobs/s, worker CPU microseconds per job, the same per worker process), workers
    warm (`runner.drain`); `meter` also splits the whole machine's CPU of the window."""
    with setup(system, cfg.tmp) as s:
        for _ in range(workers):
            s.start_worker(concurrency)
        warm = workers * concurrency  # one job per slot, as every peer is warmed up
        got = runner.drain(s.workers, s.counted, warm, cfg.jobs, meter)
        return got.rates[0], got.cpu_us, got.cpu_us_by_process


def _settings(
    system: str, workers: int | None = None, concurrency: int = CONCURRENCY
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "store": STORES[system],
        "enqueue durability": DURABILITY[system],
        "records written": AUDIT,
    }
    if system == "sqlite":
        out["synchronous"] = "FULL (default)"
    if system == "rabbitmq":
        out["delivery"] = (
            "RabbitMQ wake-ups, durable at the broker before counted "
            "(AMQP transactions of up to 100; a lone one with a publisher confirm)"
        )
    if workers is not None:
        out.update(
            {
                "worker processes": workers,
                "threads per process": concurrency,
                "warm-up": "one job per slot, drained before the clock starts",
                "poll interval s": POLL_INTERVAL,
                "submit": f"submit_many, batches of {BATCH}",
            }
        )
    return out


Run = tuple[float, float, list[float]]  # what `process_rate` returns


def process_rows(
    system: str,
    workers: int,
    shape: str,
    runs: Mapping[int, list[Run]],
    meters: Mapping[int, list[Meter]] | None = None,
) -> tuple[int, list[Measurement]]:
    """(the threads per process of the best shape, its rate and worker CPU rows).

    `runs` holds each tried threads-per-process' runs; the best is the highest median
    rate (`sweep.best`, as for the peers). With more than one tried, the label names
    the shapes and the winner, and the facts keep every shape's medians; with
    `meters`, also the whole machine's CPU per job of the best shape's runs.
    """
    shapes = [(workers, threads) for threads in runs]
    rates = {(workers, threads): [r[0] for r in got] for threads, got in runs.items()}
    (_, concurrency), values, facts = sweep.best(rates, shapes)
    best = runs[concurrency]
    label = f"{LABELS[system]}: process, {workers} worker process{'es' if workers > 1 else ''}"
    if len(shapes) > 1:
        label += f", best threads per process of {sweep.names(shapes)}: {concurrency} threads"
    elif concurrency != CONCURRENCY:
        label += f" x {concurrency} threads ({workers * concurrency} slots)"
    settings = _settings(system, workers, concurrency)
    if len(shapes) > 1:
        settings["threads per process"] = f"{concurrency} (the best of {sorted(runs)}, swept)"
        facts["worker CPU per job medians of the shapes tried (us)"] = {
            f"{workers}x{t}": round(statistics.median(r[1] for r in got), 1)
            for t, got in runs.items()
        }
    return concurrency, [
        Measurement(
            f"throughput.jobfsm.{system}.{shape}.process",
            label,
            "jobs/s",
            values,
            settings,
            facts={
                **facts,
                "worker CPU per job, us (all worker processes)": [round(r[1], 1) for r in best],
                "worker CPU per job by process, us": [[round(u, 1) for u in r[2]] for r in best],
                **machine_fact((meters or {}).get(concurrency, [])),
            },
        ),
        Measurement(
            f"throughput.jobfsm.{system}.{shape}.cpu",
            f"{label}: worker CPU per job",
            "us/job",
            [r[1] for r in best],
            settings,
            note="user + system CPU of the worker processes over the timed window (/proc)",
        ),
    ]


def process_task(
    system: str, cfg: Config, workers: int, threads: Sequence[int], shape: str
) -> list[Measurement]:
    """`cfg.repeats` runs of each threads per process; the best shape's rows, and with
    1 process on a store with a batched raw baseline, that baseline in its claim size."""
    runs: dict[int, list[Run]] = {}
    meters: dict[int, list[Meter]] = {}
    for t in threads:
        for _ in range(cfg.repeats):
            meter = Meter()
            runs.setdefault(t, []).append(process_rate(system, cfg, workers, t, meter=meter))
            meters.setdefault(t, []).append(meter)
    concurrency, rows = process_rows(system, workers, shape, runs, meters)
    if shape == "w1" and system in raw_batched.BASELINES:
        why = f"{concurrency}, the threads per process of the 1-worker row's best shape"
        rows += raw_batched.BASELINES[system](cfg, concurrency, why)
        rows += engine_path.rows(STORES[system], system, cfg, concurrency, why)
    return rows


def plan(cfg: Config) -> list[Task]:
    tasks = []
    threads = (CONCURRENCY,) if cfg.quick else THREADS
    for system in ("sqlite", "postgres", "rabbitmq"):
        label = LABELS[system]

        def enqueue(system: str = system, label: str = label) -> list[Measurement]:
            one: Callable[[], float] = lambda: enqueue_rate(system, cfg, batched=False)  # noqa: E731
            many: Callable[[], float] = lambda: enqueue_rate(system, cfg, batched=True)  # noqa: E731
            return [
                Measurement(
                    f"throughput.jobfsm.{system}.w1.enqueue",
                    f"{label}: enqueue, one `submit` per job",
                    "jobs/s",
                    repeat(cfg.repeats, one),
                    _settings(system),
                ),
                Measurement(
                    f"throughput.jobfsm.{system}.batch.enqueue",
                    f"{label}: enqueue, `submit_many` of {BATCH}",
                    "jobs/s",
                    repeat(cfg.repeats, many),
                    _settings(system),
                ),
            ]

        tasks.append(Task(f"jobfsm {system}: enqueue", enqueue))
        shapes: list[tuple[int, tuple[int, ...], str]] = [(1, threads, "w1"), (4, threads, "w4")]
        if system != "rabbitmq":
            shapes.append((1, (EQUAL_SLOTS,), f"slots{EQUAL_SLOTS}"))
        for workers, tried, shape in shapes:

            def process(
                system: str = system, workers: int = workers, tried: tuple[int, ...] = tried,
                shape: str = shape,
            ) -> list[Measurement]:  # fmt: skip
                return process_task(system, cfg, workers, tried, shape)

            what = f"{workers} worker(s) x {sweep.names([(workers, t) for t in tried])} threads"
            tasks.append(Task(f"jobfsm {system}: {what}", process))
    from benchmarks import core_figures

    tasks += core_figures.plan(cfg)
    return tasks
