"""dramatiq on RabbitMQ: enqueue rate of `send` and process rates of no-op jobs.

Every run uses a fresh queue (and its `.DQ` / `.XQ` companions), deleted after. The
client is a RabbitmqBroker with dramatiq's defaults (no publisher confirms), so the
enqueue clock stops when the queue holds every message, and in a process run a
basic.get on the sending channel is the barrier that all messages reached the queue.
"Done" is the broker's record: ready + unacked == 0 (dramatiq acks a message after
its actor ran); see `broker.wait_drained`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks import broker, runner
from benchmarks.harness import Config, version_of
from benchmarks.machine import Meter
from benchmarks.peers.dramatiq_app import QUEUE_ENV, make

DOCS = "https://dramatiq.io/reference.html#dramatiq.brokers.rabbitmq.RabbitmqBroker"
THREADS = 8  # dramatiq's CLI default --threads
PREFETCH_PER_PROCESS = THREADS * 2  # dramatiq.worker: queue prefetch = worker_threads * 2


def settings(confirm: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "version": version_of("dramatiq"),
        "pika": version_of("pika"),
        "broker": "RabbitmqBroker",
        "publisher confirms": "on (confirm_delivery=True)"
        if confirm
        else "off (default confirm_delivery=False)",
        "enqueue durability": "send waits for the broker's confirm (persistent message)"
        if confirm
        else "send returns before the broker has the message (no confirm)",
        "records written": "none: the broker's message is the only record of a job",
        "delivery mode": "persistent (dramatiq always)",
        "middleware": "default (AgeLimit, TimeLimit, ShutdownNotifications, Callbacks, "
        "Pipelines, Retries)",
        **extra,
        "docs": DOCS,
    }


def _barrier(client: Any, queue: str) -> None:
    """Return once every message sent on the broker's channel is in `queue`.

    A basic.get on the sending channel: RabbitMQ's queue process handles it in order
    after the deliveries from that channel (a passive queue.declare it answers first,
    ahead of them). A message it gets is rejected back to the queue at once.
    """
    channel = client.channel
    method, _props, _body = channel.basic_get(queue, auto_ack=False)
    if method is not None:
        channel.basic_reject(method.delivery_tag, requeue=True)


def enqueue_rate(jobs: int, confirm: bool = False) -> float:
    """Messages/s of `actor.send()` one at a time, no worker running; then the queue is deleted."""
    queue = runner.run_name("dramatiq")
    client, actor = make(queue, confirm)
    probe = broker.QueueProbe()
    try:
        actor.send()  # warm-up: connects and declares the queues; not timed
        started = time.perf_counter()
        for _ in range(jobs):
            actor.send()
        probe.wait_queued(queue, jobs + 1)
        elapsed = time.perf_counter() - started
    finally:
        client.close()
        probe.close()
        broker.delete([queue, f"{queue}.DQ", f"{queue}.XQ"])
    return jobs / elapsed


def process_rate(
    jobs: int,
    processes: int,
    folder: Path,
    threads: int = THREADS,
    confirm: bool = False,
    *,
    meter: Meter | None = None,
) -> tuple[float, float, float]:
    """(rate until ready == 0, rate until rabbitmqctl shows ready + unacked == 0,
    worker CPU microseconds per job), workers warm (`runner.drain`); `meter` also
    splits the whole machine's CPU from the first send until the queue's ready count
    is 0 (at most the prefetch of jobs still running: no `rabbitmqctl` VM is counted)."""
    queue = runner.run_name("dramatiq")
    client, actor = make(queue, confirm)
    argv = ["dramatiq", "benchmarks.peers.dramatiq_app", "--processes", str(processes)]
    argv += ["--threads", str(threads), "--queues", queue]
    probe = broker.QueueProbe()
    try:
        with runner.Workers(folder / queue, {QUEUE_ENV: queue}) as workers:
            workers.start(*argv)
            probe.wait_consumers(queue, processes, workers.wait)  # one per worker process
            system = broker.BrokerDrain(
                queue, actor.send, lambda: _barrier(client, queue), probe, workers.check
            )
            got = runner.drain(workers, system, processes * threads, jobs, meter)
    finally:
        client.close()
        probe.close()
        broker.delete([queue, f"{queue}.DQ", f"{queue}.XQ"])
    return got.rates[0], got.rates[1], got.cpu_us


def enqueue_runs(cfg: Config, confirm: bool = False) -> list[float]:
    return [enqueue_rate(cfg.jobs, confirm) for _ in range(cfg.repeats)]


def process_runs(
    cfg: Config, processes: int, threads: int = THREADS, confirm: bool = False
) -> tuple[list[float], list[float], list[float], list[Meter]]:
    """Each run's two rates and worker CPU per job, and its machine's CPU (`Meter`)."""
    meters = [Meter() for _ in range(cfg.repeats)]
    runs = [process_rate(cfg.jobs, processes, cfg.tmp, threads, confirm, meter=m) for m in meters]
    return [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs], meters
