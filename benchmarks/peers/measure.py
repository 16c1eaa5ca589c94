"""Each figure group of the peers' half of the throughput suite, as `Measurement`s.

A function here runs `cfg.repeats` runs of `cfg.jobs` jobs and names what governs the
figure: the peer's version and the settings its documentation says decide it.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from benchmarks.harness import Config, Measurement, version_of
from benchmarks.peers import celery_bench, dramatiq_bench, procrastinate_bench, raw
from benchmarks.peers import raw_pika as pika_raw

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


def _pg_server_settings() -> dict[str, Any]:
    import psycopg

    from benchmarks._services import PG_ADMIN

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('server_version', 'synchronous_commit', 'fsync', 'wal_sync_method')"
        ).fetchall()
    return {f"postgresql {name}": setting for name, setting in rows}


def raw_postgres(cfg: Config) -> list[Measurement]:
    server = _pg_server_settings()
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


def _procrastinate_process(cfg: Config, key: str, processes: int, concurrency: int) -> Measurement:
    values = procrastinate_bench.process_runs(cfg, processes, concurrency)
    settings = procrastinate_bench.settings(
        **{"worker processes": processes, "concurrency per worker": concurrency},
        **procrastinate_bench.WORKER_SETTINGS,
    )
    label = f"procrastinate, {processes} worker process(es), concurrency {concurrency}"
    return _m(key, label, values, settings, note=PROCRASTINATE_DONE)


def procrastinate_w1(cfg: Config) -> list[Measurement]:
    return [_procrastinate_process(cfg, "throughput.procrastinate.w1.process", 1, 1)]


def procrastinate_w4(cfg: Config) -> list[Measurement]:
    return [_procrastinate_process(cfg, "throughput.procrastinate.w4.process", 4, 1)]


def procrastinate_c4(cfg: Config) -> list[Measurement]:
    return [_procrastinate_process(cfg, "throughput.procrastinate.c4.process", 1, 4)]


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


def _broker_facts(prefetch: int, confirmed: list[float]) -> dict[str, Any]:
    return {
        "unacked at ready=0, at most": prefetch,
        "lower bound: rate until rabbitmqctl showed ready+unacked=0": confirmed,
    }


def dramatiq_enqueue(cfg: Config) -> list[Measurement]:
    values = dramatiq_bench.enqueue_runs(cfg)
    settings = dramatiq_bench.settings(api="actor.send(), one message per call")
    note = "No worker running; counted until a passive queue.declare on the sending channel."
    return [_m("throughput.dramatiq.w1.enqueue", "dramatiq send", values, settings, note=note)]


def _dramatiq_process(cfg: Config, key: str, processes: int) -> Measurement:
    values, confirmed = dramatiq_bench.process_runs(cfg, processes)
    prefetch = processes * dramatiq_bench.PREFETCH_PER_PROCESS
    settings = dramatiq_bench.settings(
        **{
            "worker processes": processes,
            "threads per process": f"{dramatiq_bench.THREADS} (CLI default)",
            "prefetch per process": f"{dramatiq_bench.PREFETCH_PER_PROCESS} (2 x threads, default)",
            "enqueue": "actor.send() loop from one client (dramatiq has no batch send)",
        }
    )
    label = f"dramatiq, {processes} worker process(es) x {dramatiq_bench.THREADS} threads"
    return _m(key, label, values, settings, facts=_broker_facts(prefetch, confirmed),
              note=_broker_done(prefetch, cfg.jobs))  # fmt: skip


def dramatiq_w1(cfg: Config) -> list[Measurement]:
    return [_dramatiq_process(cfg, "throughput.dramatiq.w1.process", 1)]


def dramatiq_w4(cfg: Config) -> list[Measurement]:
    return [_dramatiq_process(cfg, "throughput.dramatiq.w4.process", 4)]


def celery_enqueue(cfg: Config) -> list[Measurement]:
    values = celery_bench.enqueue_runs(cfg)
    settings = celery_bench.settings(api="task.apply_async(producer=p), one message per call")
    note = "No worker running; counted until a passive queue.declare on the producer's channel."
    return [_m("throughput.celery.w1.enqueue", "celery apply_async", values, settings, note=note)]


def _celery_process(cfg: Config, key: str, workers: int, concurrency: int) -> Measurement:
    values, confirmed = celery_bench.process_runs(cfg, workers, concurrency)
    prefetch = workers * concurrency * celery_bench.PREFETCH_MULTIPLIER
    settings = celery_bench.settings(
        **{
            "worker processes": f"{workers} worker(s) x prefork -c {concurrency}",
            "enqueue": "apply_async loop from one client (celery has no batch publish)",
        }
    )
    label = f"celery, {workers} worker(s) x prefork concurrency {concurrency}"
    return _m(key, label, values, settings, facts=_broker_facts(prefetch, confirmed),
              note=_broker_done(prefetch, cfg.jobs))  # fmt: skip


def celery_w1(cfg: Config) -> list[Measurement]:
    return [_celery_process(cfg, "throughput.celery.w1.process", 1, 1)]


def celery_w4(cfg: Config) -> list[Measurement]:
    """4 pool processes in one worker (celery's way), and 4 workers of 1 as a fact beside it."""
    main = _celery_process(cfg, "throughput.celery.w4.process", 1, 4)
    alt, alt_confirmed = celery_bench.process_runs(cfg, 4, 1)
    main.facts["4 separate workers x prefork -c 1: rate until ready=0"] = alt
    main.facts["4 separate workers x prefork -c 1: lower bound (rabbitmqctl)"] = alt_confirmed
    return [main]
