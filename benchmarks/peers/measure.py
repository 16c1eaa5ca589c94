"""Each figure group of the peers' half of the throughput suite, as `Measurement`s.

A function here runs `cfg.repeats` runs of `cfg.jobs` jobs and names what governs the
figure: the peer's version and the settings its documentation says decide it.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.harness import Config, Measurement, Task, version_of
from benchmarks.machine import Meter, machine_fact
from benchmarks.peers import (
    celery_bench,
    dramatiq_bench,
    procrastinate_bench,
    raw,
    sweep,
)
from benchmarks.peers import raw_pika as pika_raw
from benchmarks.services import pg_server_settings

CPU_FACT = "worker CPU per job, us (every worker process and its forks, from /proc)"
#: a RabbitMQ peer's runs: rates until ready == 0, until ready + unacked == 0, worker
#: CPU per job, and the machine's CPU of each run
Runs = tuple[list[float], list[float], list[float], list[Meter]]


def _rounded(values: list[float] | None) -> list[float]:
    return [round(v, 1) for v in values or []]


RAW_TX = "3 per job: insert; claim the oldest queued row (UPDATE ... RETURNING); complete"


def _m(
    key: str, label: str, values: list[float], settings: dict[str, Any], **kw: Any
) -> Measurement:
    return Measurement(key, label, kw.pop("unit", "jobs/s"), values, settings, **kw)


# --- raw baselines ----------------------------------------------------------------------


def raw_sqlite(cfg: Config) -> list[Measurement]:
    out = []
    for sync in ("FULL", "NORMAL"):
        values = [
            raw.sqlite_lifecycles(cfg.tmp / f"raw-{uuid.uuid4().hex[:8]}.db", sync, cfg.jobs)
            for _ in range(cfg.repeats)
        ]
        settings = {
            "sqlite": sqlite3.sqlite_version,
            "driver": "python sqlite3",
            "journal_mode": "WAL",
            "synchronous": sync,
            "connections": 1,
            "transactions": RAW_TX,
            "claim": "BEGIN IMMEDIATE; UPDATE ... WHERE id = (oldest queued) RETURNING id",
        }
        note = "No engine: the limit of one SQLite connection running job lifecycles."
        key = f"throughput.raw.sqlite.{sync.lower()}.process"
        out.append(_m(key, f"raw sqlite3, synchronous={sync}", values, settings, note=note))
    return out


def raw_postgres(cfg: Config) -> list[Measurement]:
    server = pg_server_settings()
    out = []
    for clients in (1, 4):
        values = [raw.postgres_lifecycles(cfg.jobs, clients) for _ in range(cfg.repeats)]
        settings = {
            "psycopg": version_of("psycopg"),
            **server,
            "clients": f"{clients} thread(s), one connection each",
            "transactions": RAW_TX,
            "claim": "FOR UPDATE SKIP LOCKED",
        }
        note = "No engine: total lifecycles/s of all clients on a fresh database."
        key = f"throughput.raw.postgres.c{clients}.process"
        out.append(_m(key, f"raw psycopg, {clients} client(s)", values, settings, note=note))
    return out


def raw_pika(cfg: Config) -> list[Measurement]:
    runs = [pika_raw.publish_consume(cfg.jobs) for _ in range(cfg.repeats)]
    base = {
        "pika": version_of("pika"),
        "queue": "classic, durable, fresh per run",
        "delivery mode": "persistent",
        "connections": 1,
    }
    publish = {**base, "publisher confirms": "on, each publish waits for its confirm"}
    consume = {
        **base,
        "prefetch": pika_raw.CONSUME_PREFETCH,
        "acks": "one basic.ack per message",
    }
    return [
        _m("throughput.raw.pika.publish", "raw pika publish (confirmed)", [r[0] for r in runs],
           publish, unit="msgs/s", note="Into an empty queue, no consumer."),
        _m("throughput.raw.pika.consume", "raw pika consume + ack", [r[1] for r in runs],
           consume, unit="msgs/s", note="From a queue holding all messages, one consumer."),
    ]  # fmt: skip


# --- procrastinate ----------------------------------------------------------------------

PROCRASTINATE_DONE = (
    "done = rows of procrastinate_jobs with status 'succeeded', polled every 10 ms "
    "from a separate connection (late by at most one poll)"
)


def procrastinate_enqueue(cfg: Config) -> list[Measurement]:
    runs = procrastinate_bench.enqueue_runs(cfg)
    single = procrastinate_bench.settings(api="task.defer(), one job per call (sync)")
    batch = procrastinate_bench.settings(api=f"task.batch_defer() of {cfg.jobs} jobs in one call")
    note = "No worker running; fresh database per run."
    return [
        _m("throughput.procrastinate.w1.enqueue", "procrastinate defer", runs["defer"], single,
           note=note),
        _m("throughput.procrastinate.batch.enqueue", "procrastinate batch_defer", runs["batch"],
           batch, note=note),
    ]  # fmt: skip


def procrastinate_sweep(cfg: Config) -> list[Measurement]:
    """Every swept processes x concurrency; rows: 1x1, the best 4-slot shape, the best."""
    grid = sweep.PROCRASTINATE_QUICK if cfg.quick else sweep.PROCRASTINATE
    both = {shape: procrastinate_bench.process_runs(cfg, *shape) for shape in grid}
    runs = {shape: r[0] for shape, r in both.items()}

    def row(key: str, what: str, shapes: list[sweep.Shape]) -> Measurement:
        (p, c), values, facts = sweep.best(runs, shapes)
        facts[CPU_FACT] = _rounded(both[(p, c)][1])
        facts.update(machine_fact(both[(p, c)][2]))
        settings = procrastinate_bench.settings(
            **{"worker processes": p, "concurrency per worker": c},
            **procrastinate_bench.WORKER_SETTINGS,
            **{"warm-up": "one job per slot, drained before the clock starts"},
        )
        label = f"procrastinate, {what}: {p} process(es) x concurrency {c}"
        return _m(key, label, values, settings, facts=facts, note=PROCRASTINATE_DONE)

    return [
        row("throughput.procrastinate.w1.process", "1 slot", [(1, 1)]),
        row("throughput.procrastinate.slots4.process",
            f"best 4-slot shape of {sweep.names(sweep.slots(grid, 4))}", sweep.slots(grid, 4)),
        row("throughput.procrastinate.best.process",
            f"best of processes x concurrency {sweep.names(grid)}", list(grid)),
    ]  # fmt: skip


# --- RabbitMQ peers ---------------------------------------------------------------------


def _broker_done(prefetch: int, jobs: int) -> str:
    return (
        "done = the queue's ready count reached 0 after the last publish (passive "
        f"queue.declare, polled every 2 ms); at that moment at most {prefetch} messages "
        "(the consumers' total prefetch) were still unacknowledged, so the figure is high "
        f"by at most {prefetch}/{jobs} = {prefetch / jobs:.1%} of the work. "
        "rabbitmqctl then confirmed ready + unacked == 0; the rate to the end of that call "
        "is a lower bound (facts)."
    )


def _broker_row(
    cfg: Config,
    key: str,
    label: str,
    settings: dict[str, Any],
    *,
    facts: dict[str, Any],
    prefetch: int,
    measured: Runs,
) -> Measurement:
    """A RabbitMQ peer's process row: the rate until ready == 0, with the worker CPU, the
    machine's CPU and the lower bound (until rabbitmqctl showed the queue empty)."""
    values, confirmed, cpu, meters = measured
    facts = {**facts, CPU_FACT: _rounded(cpu), **machine_fact(meters)}
    facts["unacked at ready=0, at most"] = prefetch
    facts["lower bound: rate until rabbitmqctl showed ready+unacked=0"] = confirmed
    return _m(key, label, values, settings, facts=facts, note=_broker_done(prefetch, cfg.jobs))


def dramatiq_enqueue(cfg: Config) -> list[Measurement]:
    values = dramatiq_bench.enqueue_runs(cfg)
    settings = dramatiq_bench.settings(api="actor.send(), one message per call")
    note = "No worker running; counted until a passive queue.declare on the sending channel."
    return [_m("throughput.dramatiq.w1.enqueue", "dramatiq send", values, settings, note=note)]


def dramatiq_sweep(cfg: Config) -> list[Measurement]:
    """Every swept processes x threads at dramatiq's defaults (no publisher confirms);
    rows: best with 1 process, best with 4, best overall, and the best shape again
    with confirmed sends (`confirm_delivery=True`)."""
    grid = sweep.DRAMATIQ_QUICK if cfg.quick else sweep.DRAMATIQ
    runs = {shape: dramatiq_bench.process_runs(cfg, *shape) for shape in grid}
    rates = {shape: r[0] for shape, r in runs.items()}

    def row(key: str, what: str, shapes: list[sweep.Shape], *, confirm: bool = False,
            measured: Runs | None = None) -> Measurement:  # fmt: skip
        (p, t), _best_values, facts = sweep.best(rates, shapes)
        settings = dramatiq_bench.settings(
            confirm,
            **{
                "worker processes": p,
                "threads per process": t,
                "prefetch per process": f"{2 * t} (2 x threads, default)",
                "enqueue": "actor.send() loop from one client (dramatiq has no batch send)",
                "warm-up": "one job per slot, drained before the clock starts",
            },
        )
        label = f"dramatiq, {what}: {p} process(es) x {t} threads"
        return _broker_row(cfg, key, label, settings, facts=facts, prefetch=p * t * 2,
                           measured=measured or runs[(p, t)])  # fmt: skip

    one, four = sweep.processes(grid, 1), sweep.processes(grid, 4)
    out = [  # each label names the shapes its row picked from
        row("throughput.dramatiq.w1.process", f"best 1-process shape of {sweep.names(one)}",
            one),
        row("throughput.dramatiq.w4.process", f"best 4-process shape of {sweep.names(four)}",
            four),
        row("throughput.dramatiq.best.process",
            f"best of processes x threads {sweep.names(grid)}", list(grid)),
    ]  # fmt: skip
    shape, _values, _facts = sweep.best(rates, list(grid))
    measured = dramatiq_bench.process_runs(cfg, *shape, confirm=True)
    out.append(row("throughput.dramatiq.confirmed.process", "confirmed sends, best shape",
                   [shape], confirm=True, measured=measured))  # fmt: skip
    return out


def dramatiq_confirmed_enqueue(cfg: Config) -> list[Measurement]:
    values = dramatiq_bench.enqueue_runs(cfg, confirm=True)
    settings = dramatiq_bench.settings(True, api="actor.send(), one message per call")
    note = "No worker running; each send waits for the broker's publisher confirm."
    return [_m("throughput.dramatiq.confirmed.enqueue", "dramatiq send, confirmed", values,
               settings, note=note)]  # fmt: skip


def celery_enqueue(cfg: Config) -> list[Measurement]:
    values = celery_bench.enqueue_runs(cfg)
    settings = celery_bench.settings(api="task.apply_async(producer=p), one message per call")
    note = "No worker running; counted until a passive queue.declare on the producer's channel."
    return [_m("throughput.celery.w1.enqueue", "celery apply_async", values, settings, note=note)]


def celery_sweep(cfg: Config) -> list[Measurement]:
    """Every swept workers x prefork concurrency at celery's defaults; rows: 1 pool
    process, the best with 4 pool processes in all, the best overall, and the best
    shape again with confirmed publishes, acks_late and reject_on_worker_lost."""
    grid = sweep.CELERY_QUICK if cfg.quick else sweep.CELERY
    runs = {shape: celery_bench.process_runs(cfg, *shape) for shape in grid}
    rates = {shape: r[0] for shape, r in runs.items()}

    def row(key: str, what: str, shapes: list[sweep.Shape], *, durable: bool = False,
            measured: Runs | None = None) -> Measurement:  # fmt: skip
        (w, c), _best_values, facts = sweep.best(rates, shapes)
        prefetch = w * c * celery_bench.PREFETCH_MULTIPLIER
        settings = celery_bench.settings(
            durable,
            **{
                "worker processes": f"{w} worker(s) x prefork -c {c}",
                "enqueue": "apply_async loop from one client (celery has no batch publish)",
                "warm-up": "one job per slot, drained before the clock starts",
            },
        )
        label = f"celery, {what}: {w} worker(s) x prefork concurrency {c}"
        return _broker_row(cfg, key, label, settings, facts=facts, prefetch=prefetch,
                           measured=measured or runs[(w, c)])  # fmt: skip

    slots4 = sweep.slots(grid, 4)
    out = [  # each label names the shapes its row picked from
        row("throughput.celery.w1.process", "1 pool process", [(1, 1)]),
        row("throughput.celery.w4.process", f"best 4-slot shape of {sweep.names(slots4)}",
            slots4),
        row("throughput.celery.best.process",
            f"best of workers x concurrency {sweep.names(grid)}", list(grid)),
    ]  # fmt: skip
    shape, _values, _facts = sweep.best(rates, list(grid))
    measured = celery_bench.process_runs(cfg, *shape, durable=True)
    out.append(row("throughput.celery.durable.process",
                   "confirmed publishes + acks_late + reject_on_worker_lost, best shape",
                   [shape], durable=True, measured=measured))  # fmt: skip
    return out


def celery_durable_enqueue(cfg: Config) -> list[Measurement]:
    values = celery_bench.enqueue_runs(cfg, durable=True)
    settings = celery_bench.settings(True, api="task.apply_async(producer=p), one per call")
    note = "No worker running; each publish waits for the broker's publisher confirm."
    return [_m("throughput.celery.durable.enqueue", "celery apply_async, confirmed", values,
               settings, note=note)]  # fmt: skip


# --- the plan ---------------------------------------------------------------------------


def plan(cfg: Config) -> list[Task]:
    groups: list[tuple[str, Callable[[Config], list[Measurement]]]] = [
        ("raw sqlite3 lifecycles", raw_sqlite),
        ("raw psycopg lifecycles", raw_postgres),
        ("raw pika publish and consume", raw_pika),
        ("procrastinate enqueue", procrastinate_enqueue),
        ("procrastinate process, processes x concurrency swept", procrastinate_sweep),
        ("dramatiq enqueue", dramatiq_enqueue),
        ("dramatiq enqueue, confirmed", dramatiq_confirmed_enqueue),
        ("dramatiq process, processes x threads swept", dramatiq_sweep),
        ("celery enqueue", celery_enqueue),
        ("celery enqueue, confirmed", celery_durable_enqueue),
        ("celery process, workers x concurrency swept", celery_sweep),
    ]
    return [Task(f"throughput peers: {label}", _bind(run, cfg)) for label, run in groups]


Run = Callable[[Config], list[Measurement]]


def _bind(run: Run, cfg: Config) -> Callable[[], list[Measurement]]:
    return lambda: run(cfg)
