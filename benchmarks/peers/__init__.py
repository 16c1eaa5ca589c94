"""The peers and raw baselines of the end-to-end throughput suite.

`plan(cfg)` returns one task per figure group; each task returns `Measurement`s keyed
`throughput.<system>.<shape>.<enqueue|process>`:

- peers on the same services, no-op task: procrastinate (PostgreSQL), dramatiq and
  celery (RabbitMQ). Enqueue: one client, one job at a time, no worker running.
  Process: workers started from the peer's own CLI and warmed up first; the clock
  runs from the first enqueue (the batch API where there is one) until the peer's
  own record says every job is done.
- raw baselines, no engine: sqlite3 and psycopg running the three transactions of a
  job lifecycle by hand, and pika publishing with confirms and consuming with acks.

The submodules import their peer library; nothing heavy is imported here, because
the peers' worker processes import `benchmarks.peers.<peer>_app` (and so this file).
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.harness import Config, Measurement, Task

__all__ = ["plan"]


def plan(cfg: Config) -> list[Task]:
    from benchmarks.peers import measure

    groups: list[tuple[str, Callable[[Config], list[Measurement]]]] = [
        ("raw sqlite3 lifecycles", measure.raw_sqlite),
        ("raw psycopg lifecycles", measure.raw_postgres),
        ("raw pika publish and consume", measure.raw_pika),
        ("procrastinate enqueue", measure.procrastinate_enqueue),
        ("procrastinate process, 1 worker", measure.procrastinate_w1),
        ("procrastinate process, 4 workers", measure.procrastinate_w4),
        ("procrastinate process, concurrency 4", measure.procrastinate_c4),
        ("dramatiq enqueue", measure.dramatiq_enqueue),
        ("dramatiq process, 1 worker process", measure.dramatiq_w1),
        ("dramatiq process, 4 worker processes", measure.dramatiq_w4),
        ("celery enqueue", measure.celery_enqueue),
        ("celery process, 1 worker process", measure.celery_w1),
        ("celery process, 4 worker processes", measure.celery_w4),
    ]
    return [Task(f"throughput peers: {label}", _bind(run, cfg)) for label, run in groups]


Run = Callable[[Config], list[Measurement]]


def _bind(run: Run, cfg: Config) -> Callable[[], list[Measurement]]:
    return lambda: run(cfg)
