"""The peers and raw baselines of the end-to-end throughput suite.

`measure.plan(cfg)` returns one task per figure group; each task returns `Measurement`s keyed
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

The submodules import their peer library; nothing is imported here, because the
peers' worker processes import `benchmarks.peers.<peer>_app` (and so this file).
"""
