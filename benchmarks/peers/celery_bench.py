"""celery on RabbitMQ (amqp): enqueue rate of `apply_async` and process rates of no-op jobs.

Every run uses a fresh queue (and the direct exchange of the same name celery
declares for it), deleted after. The client publishes with one producer
(`apply_async(producer=...)`, the path `delay` takes without the pool round trip);
celery publishes without confirms, so the enqueue clock stops when the queue holds
every message, and in a process run a basic.get on the producer's channel is the
barrier that all messages reached the queue.
"Done" is the broker's record, ready + unacked == 0; celery acks early by default
(before the task runs), so at that moment at most one no-op task per pool process
may still be running. See `broker.wait_drained`.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from benchmarks import broker, runner
from benchmarks.harness import Config, version_of
from benchmarks.machine import Meter
from benchmarks.peers.celery_app import DURABLE_ENV, QUEUE_ENV, make_app

DOCS = "https://docs.celeryq.dev/en/stable/userguide/configuration.html"
PREFETCH_MULTIPLIER = 4  # celery's default worker_prefetch_multiplier


def settings(durable: bool = False, **extra: Any) -> dict[str, Any]:
    if durable:
        extra = {
            "acks_late": "on, with task_reject_on_worker_lost (ack after the task ran)",
            "publisher confirms": "on (broker_transport_options confirm_publish=True)",
            "enqueue durability": "apply_async waits for the broker's confirm",
            **extra,
        }
    return {
        "version": version_of("celery"),
        "kombu": version_of("kombu"),
        "transport": "amqp (py-amqp)",
        "results": "ignored (task_ignore_result=True, no result backend)",
        "pool": "prefork (default)",
        "worker_prefetch_multiplier": f"{PREFETCH_MULTIPLIER} (default)",
        "acks_late": "off (default: ack before the task runs)",
        "publisher confirms": "off (kombu default)",
        "delivery mode": "persistent (default)",
        "enqueue durability": "apply_async returns before the broker has the message "
        "(no confirm); acked before the task runs",
        "records written": "none: the broker's message is the only record of a job",
        "remote control / events / gossip / mingle / heartbeat": "off",
        **extra,
        "docs": DOCS,
    }


def _barrier(producer: Any, queue: str) -> None:
    """Return once every message published on the producer's channel is in `queue`.

    A basic.get on that channel: RabbitMQ's queue process handles it in order after
    the deliveries from the channel (a passive queue.declare it answers first, ahead
    of them). A message it gets is rejected back to the queue at once.
    """
    message = producer.channel.basic_get(queue=queue, no_ack=False)
    if message is not None:
        producer.channel.basic_reject(message.delivery_tag, requeue=True)


def enqueue_rate(jobs: int, durable: bool = False) -> float:
    """Messages/s of `apply_async` one at a time, no worker running; then the queue is deleted."""
    queue = runner.run_name("celery")
    app, noop = make_app(queue, durable)
    probe = broker.QueueProbe()
    try:
        with app.producer_or_acquire() as producer:
            noop.apply_async(producer=producer)  # warm-up: declares queue and exchange
            started = time.perf_counter()
            for _ in range(jobs):
                noop.apply_async(producer=producer)
            probe.wait_queued(queue, jobs + 1)
            elapsed = time.perf_counter() - started
    finally:
        app.close()
        probe.close()
        broker.delete([queue], [queue])
    return jobs / elapsed


def worker_argvs(queue: str, workers: int, concurrency: int) -> list[list[str]]:
    host = socket.gethostname()
    base = ["celery", "-A", "benchmarks.peers.celery_app", "worker", "--pool=prefork"]
    base += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    base.append(f"--concurrency={concurrency}")
    return [[*base, f"--hostname={queue}_{n}@{host}"] for n in range(workers)]


def process_rate(
    jobs: int,
    workers: int,
    concurrency: int,
    folder: Path,
    durable: bool = False,
    *,
    meter: Meter | None = None,
) -> tuple[float, float, float]:
    """(rate until ready == 0, rate until rabbitmqctl shows ready + unacked == 0,
    worker CPU microseconds per job), workers warm (`runner.drain`); `meter` also
    splits the whole machine's CPU from the first publish until the queue's ready
    count is 0."""
    queue = runner.run_name("celery")
    app, noop = make_app(queue, durable)
    env = {QUEUE_ENV: queue, DURABLE_ENV: "1" if durable else "0"}
    probe = broker.QueueProbe()
    try:
        with runner.Workers(folder / queue, env) as procs, app.producer_or_acquire() as producer:
            for argv in worker_argvs(queue, workers, concurrency):
                procs.start(*argv)
            probe.wait_consumers(queue, workers, procs.wait)  # one consumer per worker
            system = broker.BrokerDrain(
                queue,
                lambda: noop.apply_async(producer=producer),
                lambda: _barrier(producer, queue),
                probe,
                procs.check,
            )
            got = runner.drain(procs, system, workers * concurrency, jobs, meter)
    finally:
        app.close()
        probe.close()
        broker.delete([queue], [queue])
    return got.rates[0], got.rates[1], got.cpu_us


def enqueue_runs(cfg: Config, durable: bool = False) -> list[float]:
    return [enqueue_rate(cfg.jobs, durable) for _ in range(cfg.repeats)]


def process_runs(
    cfg: Config, workers: int, concurrency: int, durable: bool = False
) -> tuple[list[float], list[float], list[float], list[Meter]]:
    """Each run's two rates and worker CPU per job, and its machine's CPU (`Meter`)."""
    meters = [Meter() for _ in range(cfg.repeats)]
    runs = [process_rate(cfg.jobs, workers, concurrency, cfg.tmp, durable, meter=m) for m in meters]
    return [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs], meters
