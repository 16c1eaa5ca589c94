"""The celery app the benchmark's workers run: one no-op task named "noop".

    BENCH_CELERY_QUEUE=name python -m celery -A benchmarks.peers.celery_app worker -c 1

RabbitMQ over amqp (py-amqp), results ignored and no result backend, remote control
off (no pidbox queues or exchanges to clean up), everything else at celery's
defaults: prefetch multiplier 4, early acks (acks_late off), persistent messages,
no publisher confirms. The benchmark builds its own client app with `make_app(queue)`.
A second task, "stamp", stamps its start for the latency suite (`benchmarks.stamps`).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from benchmarks.harness import AMQP_URL
from benchmarks.stamps import stamp

QUEUE_ENV = "BENCH_CELERY_QUEUE"
DURABLE_ENV = "BENCH_CELERY_DURABLE"  # "1": confirmed publishes, acks_late, reject_on_worker_lost


def nothing() -> None:
    return None


def make_app(queue: str, durable: bool = False) -> tuple[Celery, Any]:
    """The app at celery's defaults, or with `durable`: publisher confirms on, and a
    message acked only after its task ran (acks_late) and requeued if the worker
    process running it dies (reject_on_worker_lost)."""
    app = Celery("bench_celery", broker=AMQP_URL, backend=None)
    if durable:
        app.conf.update(
            broker_transport_options={"confirm_publish": True},
            task_acks_late=True,
            task_reject_on_worker_lost=True,
        )
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=queue,  # the exchange and routing key default to it too
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    app.task(name="stamp")(stamp)  # the latency suite's: app.tasks["stamp"]
    return app, app.task(name="noop")(nothing)


app, noop = make_app(
    os.environ.get(QUEUE_ENV, "bench_celery_unset"), os.environ.get(DURABLE_ENV) == "1"
)
