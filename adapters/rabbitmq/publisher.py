"""Publishing wake-ups: a connection of its own, confirms always on, mandatory routing.

The publisher has its own connection so that `publish` can be called from any
thread (Engine.submit in request handlers, the repair sweep) without ever
touching the consumer's I/O thread: pika connections are not thread-safe, so
this one is used by one thread at a time under a lock, and a slow or failing
publish never stalls consumption.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from fsm.records import Job

from . import messages, topology
from ._pika import pika, pika_errors
from .classify import classify
from .config import RabbitConfig
from .errors import PublishFailed

log = logging.getLogger(__name__)


class Publisher:
    """Publishes wake-ups for committed jobs and reads queue depths for the repair sweep."""

    def __init__(self, config: RabbitConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._conn: Any = None
        self._channel: Any = None
        self._declared: set[str] = set()
        self._closed = False
        self.published = 0

    # --- connection ----------------------------------------------------------------

    def _ensure(self) -> Any:
        if self._closed:
            raise PublishFailed("the RabbitMQ publisher is closed")
        if self._channel is not None and self._channel.is_open and self._conn.is_open:
            self._conn.process_data_events(0)  # service heartbeats of an idle connection
            return self._channel
        self._drop()
        self._conn = pika.BlockingConnection(topology.parameters(self._config))
        channel = self._conn.channel()
        channel.confirm_delivery()
        topology.declare_dead_letters(channel, self._config)
        self._channel = channel
        return channel

    def _drop(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        self._declared.clear()
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception:  # closing a broken connection: nothing left to save
                log.debug("closing the publisher connection failed", exc_info=True)

    def _declare(self, channel: Any, queue: str) -> None:
        if queue not in self._declared:
            topology.declare_queues(channel, self._config, [queue])
            self._declared.add(queue)

    # --- publishing ------------------------------------------------------------------

    def publish(self, jobs: Sequence[Job]) -> None:
        """Publish one confirmed, persistent, mandatory wake-up per job, in order.

        A lost connection is retried `publish_retries` times from the first
        unconfirmed job; an unroutable or nacked message, or a fatal broker
        error, raises PublishFailed at once. The jobs stay queued either way.
        """
        if not jobs:
            return
        with self._lock:
            done = 0
            for round_ in range(self._config.publish_retries + 1):
                try:
                    channel = self._ensure()
                    for job in jobs[done:]:
                        self._declare(channel, job.queue)
                        channel.basic_publish(
                            exchange="",
                            routing_key=self._config.queue_name(job.queue),
                            body=messages.encode(job),
                            properties=pika.BasicProperties(
                                content_type=messages.CONTENT_TYPE,
                                delivery_mode=pika.DeliveryMode.Persistent,
                                message_id=job.id,
                                correlation_id=job.correlation_id,
                                type=job.kind,
                            ),
                            mandatory=True,
                        )
                        done += 1
                        self.published += 1
                    return
                except pika_errors.UnroutableError as err:
                    raise PublishFailed(
                        f"wake-up for job {jobs[done].id} is unroutable: queue "
                        f"{self._config.queue_name(jobs[done].queue)!r} does not exist"
                    ) from err
                except pika_errors.NackError as err:
                    raise PublishFailed(
                        f"the broker refused (nacked) the wake-up for job {jobs[done].id}"
                    ) from err
                except Exception as err:
                    verdict = classify(err)
                    self._drop()
                    if not verdict.recoverable or round_ == self._config.publish_retries:
                        raise PublishFailed(
                            f"publishing wake-ups for {len(jobs) - done} jobs failed "
                            f"({verdict.kind}): {verdict.detail}"
                        ) from err
                    log.info("publisher connection lost (%s); reconnecting once", verdict.detail)

    def publish_raw(self, queue: str, body: bytes, headers: dict[str, Any] | None = None) -> None:
        """Publish arbitrary bytes to a work queue (tests, tools). Confirmed and mandatory."""
        with self._lock:
            channel = self._ensure()
            self._declare(channel, queue)
            channel.basic_publish(
                exchange="",
                routing_key=self._config.queue_name(queue),
                body=body,
                properties=pika.BasicProperties(delivery_mode=2, headers=headers),
                mandatory=True,
            )

    def keepalive(self) -> None:
        """Service heartbeats of an idle connection; a dead one is dropped quietly."""
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.process_data_events(0)
            except Exception as err:
                log.debug("idle publisher connection lost: %s", err)
                self._drop()

    def dead_letter(self, body: bytes, reason: str, queue_name: str) -> None:
        """Publish a copy of a message to the dead-letter exchange with the reason."""
        with self._lock:
            channel = self._ensure()
            channel.basic_publish(
                exchange=self._config.dead_letter_exchange,
                routing_key=queue_name,
                body=body,
                properties=pika.BasicProperties(
                    delivery_mode=pika.DeliveryMode.Persistent,
                    headers={messages.REASON_HEADER: reason, messages.QUEUE_HEADER: queue_name},
                ),
            )

    def ready_counts(self, queues: Iterable[str]) -> dict[str, int]:
        """Messages waiting (ready, not delivered) in each queue's broker queue."""
        with self._lock:
            try:
                return topology.declare_queues(self._ensure(), self._config, queues)
            except Exception as err:
                self._drop()
                raise PublishFailed(f"reading queue depths failed: {classify(err).detail}") from err

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()
