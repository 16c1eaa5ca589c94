"""Raw RabbitMQ baselines with pika: the broker's limit with no job library.

- `publish_consume`: persistent publishes with publisher confirms on one connection
  (each `basic_publish` waits for its confirm, as a job library's confirmed `send`
  does), timed; then one consumer acking each message, timed separately.
- `end_to_end`: publisher(s) and consumer at once, the clock running from the first
  publish to the last ack (the pipeline `benchmarks/rabbitmq.py` compares against).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pika

from benchmarks.broker import connect, delete

PROPS = pika.BasicProperties(delivery_mode=2, content_type="application/json")
CONSUME_PREFETCH = 16  # dramatiq's default for one process of 8 threads (2 per thread)


def _consume(queue: str, jobs: int, prefetch: int, ready: threading.Event | None = None) -> float:
    """Consume and ack `jobs` messages; the seconds from `basic.consume` to the last ack."""
    conn = connect()
    try:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=prefetch)
        got = 0

        def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
            nonlocal got
            ch.basic_ack(method.delivery_tag)
            got += 1
            if got >= jobs:
                ch.stop_consuming()

        started = time.perf_counter()
        channel.basic_consume(queue, on_message)
        if ready is not None:
            ready.set()
        channel.start_consuming()
        return time.perf_counter() - started
    finally:
        conn.close()


def publish_consume(jobs: int, prefetch: int = CONSUME_PREFETCH) -> tuple[float, float]:
    """(publish msgs/s, consume msgs/s) on a fresh durable queue, deleted afterwards."""
    queue = f"bench_raw_{uuid.uuid4().hex[:10]}"
    conn = connect()
    try:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        started = time.perf_counter()
        for i in range(jobs):
            channel.basic_publish("", queue, b'{"job_id": "%d"}' % i, PROPS, mandatory=True)
        published = time.perf_counter() - started
        count = channel.queue_declare(queue, passive=True).method.message_count
        if count != jobs:
            raise RuntimeError(f"benchmark: raw pika queue holds {count} of {jobs} messages")
        conn.close()
        consumed = _consume(queue, jobs, prefetch)
    finally:
        if conn.is_open:
            conn.close()
        delete([queue])
    return jobs / published, jobs / consumed


def end_to_end(jobs: int, prefetch: int, publishers: int = 1, limit: float = 600.0) -> float:
    """Msgs/s from the first confirmed publish to the last ack, publishing and consuming at once."""
    queue = f"bench_raw_{uuid.uuid4().hex[:10]}"
    setup = connect()
    setup.channel().queue_declare(queue, durable=True)
    setup.close()
    ready = threading.Event()
    consumer = threading.Thread(target=_consume, args=(queue, jobs, prefetch, ready))
    consumer.start()
    channels = []
    try:
        if not ready.wait(30):
            raise TimeoutError("benchmark: raw pika consumer did not start within 30 s")
        for _ in range(publishers):  # a connection per publishing thread: pika is not thread-safe
            conn = connect()
            channel = conn.channel()
            channel.confirm_delivery()
            channels.append((conn, channel))

        def produce(channel: Any, share: range) -> None:
            for i in share:
                channel.basic_publish("", queue, b'{"job_id": "%d"}' % i, PROPS, mandatory=True)

        producers = [
            threading.Thread(target=produce, args=(channel, range(n, jobs, publishers)))
            for n, (_conn, channel) in enumerate(channels)
        ]
        started = time.perf_counter()
        for producer in producers:
            producer.start()
        consumer.join(limit)
        elapsed = time.perf_counter() - started
        for producer in producers:
            producer.join()
        if consumer.is_alive():
            raise TimeoutError(f"benchmark: raw pika consumer did not finish within {limit:g}s")
    finally:
        for conn, _channel in channels:
            conn.close()
        delete([queue])  # also cancels a consumer still waiting
        consumer.join(10)
    return jobs / elapsed
