"""The peers and raw baselines of the end-to-end throughput suite.

`plan(cfg)` returns one task per figure group; each task returns `Measurement`s keyed
`throughput.<system>.<shape>.<enqueue|process>`:

- peers on the same services, no-op task: procrastinate (PostgreSQL), dramatiq and
  celery (RabbitMQ). Enqueue: one client, one job at a time, no worker running.
  Process: workers started from the peer's own CLI and warmed up first; the clock
  runs from the first enqueue (the batch API where there is one) until the peer's
  own record says every job is done.
- raw baselines, no engine: sqlite3 and psycopg running the three transactions of a
  job lifecycle by hand, one job at a time; and pika publishing with confirms and
  consuming with acks. The baselines batched like a worker (`raw_batched`) run in the
  throughput suite, beside the jobfsm row whose claim size they take.
- each peer's processes x concurrency is swept (`sweep`) and its best shape reported,
  beside its 1-slot and equal-slot shapes; dramatiq and celery are also run with
  enqueue durability equal to jobfsm's (confirmed publishes; celery with acks_late
  and reject_on_worker_lost).

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
        ("procrastinate process, processes x concurrency swept", measure.procrastinate_sweep),
        ("dramatiq enqueue", measure.dramatiq_enqueue),
        ("dramatiq enqueue, confirmed", measure.dramatiq_confirmed_enqueue),
        ("dramatiq process, processes x threads swept", measure.dramatiq_sweep),
        ("celery enqueue", measure.celery_enqueue),
        ("celery enqueue, confirmed", measure.celery_durable_enqueue),
        ("celery process, workers x concurrency swept", measure.celery_sweep),
    ]
    return [Task(f"throughput peers: {label}", _bind(run, cfg)) for label, run in groups]


Run = Callable[[Config], list[Measurement]]


def _bind(run: Run, cfg: Config) -> Callable[[], list[Measurement]]:
    return lambda: run(cfg)
