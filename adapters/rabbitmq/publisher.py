"""Publishing wake-ups: a connection of its own, batches in AMQP transactions, mandatory routing.

Every publish is durable at the broker before `publish` returns: the channel is
transactional, and RabbitMQ answers `tx.commit` only once the messages of the batch
are routed and durable (and sends `basic.return` for an unroutable one before the
commit's answer). A batch of up to `publish_batch` wake-ups costs one commit. A lone
wake-up goes through a second channel with publisher confirms instead, which answer
one message faster than a transaction does.

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
        self._channel: Any = None  # transactional: batches
        self._single: Any = None  # publisher confirms: lone messages
        self._declared: set[str] = set()
        self._closed = False
        self._returned: list[str] = []  # message ids the broker could not route
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
        channel.add_on_return_callback(self._on_return)
        channel.tx_select()
        topology.declare_dead_letters(channel, self._config)
        self._single = self._conn.channel()
        self._single.confirm_delivery()
        self._channel = channel
        return channel

    def _drop(self) -> None:
        conn, self._conn, self._channel, self._single = self._conn, None, None, None
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

    def _on_return(self, _channel: Any, _method: Any, properties: Any, _body: bytes) -> None:
        self._returned.append(str(properties.message_id))

    def _commit(self, channel: Any) -> list[str]:
        """Commit the batch; the ids of its messages the broker returned as unroutable."""
        channel.tx_commit()
        self._conn.process_data_events(0)  # dispatch returns, which precede commit-ok
        returned, self._returned = self._returned, []
        return returned

    # --- publishing ------------------------------------------------------------------

    def publish(self, jobs: Sequence[Job]) -> None:
        """Publish one durable, persistent, mandatory wake-up per job, in order.

        Batches of `publish_batch` are committed one transaction each. A lost
        connection is retried `publish_retries` times from the first uncommitted
        batch; an unroutable message, or a fatal broker error, raises PublishFailed
        at once. The jobs stay queued either way.
        """
        if not jobs:
            return
        size = self._config.publish_batch
        with self._lock:
            done = 0
            for round_ in range(self._config.publish_retries + 1):
                try:
                    channel = self._ensure()
                    while done < len(jobs):
                        batch = jobs[done : done + size]
                        for job in batch:
                            self._declare(channel, job.queue)
                        if len(batch) == 1:
                            self._publish_confirmed(batch[0])
                            done += 1
                            self.published += 1
                            continue
                        for job in batch:
                            channel.basic_publish(
                                exchange="",
                                routing_key=self._config.queue_name(job.queue),
                                body=messages.encode(job),
                                properties=_properties(job),
                                mandatory=True,
                            )
                        returned = self._commit(channel)
                        done += len(batch)
                        self.published += len(batch) - len(returned)
                        if returned:
                            queue = next(j.queue for j in batch if j.id == returned[0])
                            raise self._unroutable(returned[0], queue, len(returned))
                    return
                except PublishFailed:
                    raise
                except Exception as err:
                    verdict = classify(err)
                    self._drop()
                    if not verdict.recoverable or round_ == self._config.publish_retries:
                        raise PublishFailed(
                            f"publishing wake-ups for {len(jobs) - done} jobs failed "
                            f"({verdict.kind}): {verdict.detail}"
                        ) from err
                    log.info("publisher connection lost (%s); reconnecting once", verdict.detail)

    def _publish_confirmed(self, job: Job) -> None:
        try:
            self._single.basic_publish(
                exchange="",
                routing_key=self._config.queue_name(job.queue),
                body=messages.encode(job),
                properties=_properties(job),
                mandatory=True,
            )
        except pika_errors.UnroutableError as err:
            raise self._unroutable(job.id, job.queue, 1) from err
        except pika_errors.NackError as err:
            raise PublishFailed(
                f"the broker refused (nacked) the wake-up for job {job.id}"
            ) from err

    def _unroutable(self, job_id: str, queue: str, count: int) -> PublishFailed:
        more = f" ({count} in all)" if count > 1 else ""
        return PublishFailed(
            f"wake-up for job {job_id} is unroutable: queue "
            f"{self._config.queue_name(queue)!r} does not exist{more}"
        )

    def publish_raw(self, queue: str, body: bytes, headers: dict[str, Any] | None = None) -> None:
        """Publish arbitrary bytes to a work queue (tests, tools). Durable and mandatory."""
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
            if self._commit(channel):
                raise PublishFailed(f"queue {self._config.queue_name(queue)!r} does not exist")

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
            self._commit(channel)

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


def _properties(job: Job) -> Any:
    return pika.BasicProperties(
        content_type=messages.CONTENT_TYPE,
        delivery_mode=pika.DeliveryMode.Persistent,
        message_id=job.id,
        correlation_id=job.correlation_id,
        type=job.kind,
    )
