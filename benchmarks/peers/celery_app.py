"""The celery app the benchmark's workers run: one no-op task named "noop".

    BENCH_CELERY_QUEUE=name python -m celery -A benchmarks.peers.celery_app worker -c 1

RabbitMQ over amqp (py-amqp), results ignored and no result backend, remote control
off (no pidbox queues or exchanges to clean up), everything else at celery's
defaults: prefetch multiplier 4, early acks (acks_late off), persistent messages,
no publisher confirms. The benchmark builds its own client app with `make_app(queue)`.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from benchmarks.harness import AMQP_URL

QUEUE_ENV = "BENCH_CELERY_QUEUE"


def nothing() -> None:
    return None


def make_app(queue: str) -> tuple[Celery, Any]:
    app = Celery("bench_celery", broker=AMQP_URL, backend=None)
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=queue,  # the exchange and routing key default to it too
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )

    return app, app.task(name="noop")(nothing)


app, noop = make_app(os.environ.get(QUEUE_ENV, "bench_celery_unset"))
