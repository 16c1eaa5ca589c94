"""The dramatiq app of the crash suite (`dramatiq benchmarks.crash.dramatiq_app`).

Per run, from the environment: CRASH_AMQP_URL (the broker; a `heartbeat=` query
parameter lowers pika's AMQP heartbeat, unset = negotiated with the server, 60 s on
RabbitMQ) and CRASH_QUEUE (the run's own queue).
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from benchmarks.crash import marks

AMQP_URL = os.environ.get("CRASH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
QUEUE = os.environ.get("CRASH_QUEUE", "crash")

broker = RabbitmqBroker(url=AMQP_URL)
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="crash_sleep", queue_name=QUEUE, max_retries=0)
def crash_sleep(marks_dir: str, seconds: float, effect: bool = False) -> None:
    marks.unfenced_job(marks_dir, seconds, effect)
