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

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from fsm.errors import BadInput
from fsm.records import Job

from . import messages, topology
from ._pika import pika, pika_errors
from .classify import classify
from .config import RabbitConfig
from .errors import PublishFailed

log = logging.getLogger(__name__)

#: job ids remembered as unpublishable (or sent without a property); beyond, the oldest go
SKIPPED_LIMIT = 10_000
#: what pika raises while encoding a message, before anything is written to the socket
_ENCODING_ERRORS = (pika_errors.ShortStringTooLong, UnicodeEncodeError, TypeError, ValueError)


#: bytes of a version-2 body besides its ids: `{"v":2,"job_ids":[]}`
_MANY_OVERHEAD = len(b'{"v":2,"job_ids":[]}')


def _short(value: str) -> str | None:
    """`value` as an AMQP short-string property, or None if it cannot be one."""
    return None if messages.short_string_problem("message_id", value) else value


@attrs.frozen
class Outgoing:
    """One wake-up message ready to publish: the jobs it names and how it goes out."""

    jobs: tuple[Job, ...]
    routing_key: str
    body: bytes
    properties: Any

    @property
    def message_id(self) -> str:
        return str(self.properties.message_id)


class Unpublishable(Exception):
    """This job's wake-up cannot be put on the wire; `reason` says why."""

    def __init__(self, job: Job, reason: str) -> None:
        self.job = job
        self.reason = reason
        super().__init__(f"wake-up of job {job.id} cannot be published: {reason}")


class Skipped:
    """Wake-ups that could not be published as they are, each logged once (bounded).

    `blocked` ids (no wake-up can be made: e.g. a routing key over 255 bytes) are left
    out of later batches and repair sweeps; the job stays queued in the store. Ids sent
    without a hint property (an over-long `correlation_id`) are only remembered so that
    the warning is not repeated.
    """

    def __init__(self, limit: int = SKIPPED_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._seen: OrderedDict[tuple[str, bool], str] = OrderedDict()

    def note(self, job: Job, reason: str, *, blocked: bool) -> None:
        key = (job.id, blocked)
        with self._lock:
            if key in self._seen:
                return
            self._seen[key] = reason
            while len(self._seen) > self._limit:
                self._seen.popitem(last=False)
        if blocked:
            log.error(
                "wake-up of job %s (queue %r) cannot be published and is skipped: %s; the job "
                "stays queued in the store (the rest of its batch is published)",
                job.id,
                job.queue,
                reason,
            )
        else:
            log.warning("wake-up of job %s is sent without a hint property: %s", job.id, reason)

    def blocked(self, job_id: str) -> bool:
        with self._lock:
            return (job_id, True) in self._seen

    def reason(self, job_id: str) -> str | None:
        with self._lock:
            return self._seen.get((job_id, True))


class Publisher:
    """Publishes wake-ups for committed jobs and reads queue depths for the repair sweep."""

    def __init__(self, config: RabbitConfig, skipped: Skipped | None = None) -> None:
        self._config = config
        self.skipped = Skipped() if skipped is None else skipped
        self._lock = threading.Lock()
        self._conn: Any = None
        self._channel: Any = None  # transactional: batches
        self._single: Any = None  # publisher confirms: lone messages
        self._declared: set[str] = set()
        self._closed = False
        self._returned: list[str] = []  # message ids the broker could not route
        self.published = 0
        #: connections opened so far (a reconnect adds one)
        self.connections = 0

    # --- connection ----------------------------------------------------------------

    def _ensure(self) -> Any:
        if self._closed:
            raise PublishFailed("the RabbitMQ publisher is closed")
        if self._channel is not None and self._channel.is_open and self._conn.is_open:
            self._conn.process_data_events(0)  # service heartbeats of an idle connection
            return self._channel
        self._drop()
        self._conn = pika.BlockingConnection(topology.parameters(self._config))
        self.connections += 1
        topology.declare_dead_letters(self._conn, self._config)
        channel = self._conn.channel()
        channel.add_on_return_callback(self._on_return)
        channel.tx_select()
        self._single = self._conn.channel()
        self._single.confirm_delivery()
        self._channel = channel
        return channel

    @property
    def connected(self) -> bool:
        """True while this publisher holds an open connection."""
        conn = self._conn
        return conn is not None and bool(conn.is_open)

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
        """Publish durable, persistent, mandatory wake-ups for `jobs`, in order.

        The jobs of one queue share a message, up to `wakeup_ids` ids each (`wakeups`).
        Batches of `publish_batch` messages are committed one transaction each. A lost
        connection is retried `publish_retries` times from the first uncommitted
        batch; an unroutable message, or a fatal broker error, raises PublishFailed
        at once. The jobs stay queued either way.
        """
        if not jobs:
            return
        size = self._config.publish_batch
        with self._lock:
            wakeups = self.wakeups(jobs)
            done = 0
            for round_ in range(self._config.publish_retries + 1):
                try:
                    channel = self._ensure()
                    while done < len(wakeups):
                        batch = wakeups[done : done + size]
                        for wakeup in batch:
                            self._declare(channel, wakeup.jobs[0].queue)
                        if len(batch) == 1:
                            self._publish_confirmed(batch[0])
                        else:
                            self._publish_batch(channel, batch)
                        done += len(batch)
                    return
                except PublishFailed:
                    raise
                except Exception as err:
                    verdict = classify(err)
                    detail = self._config.scrub(verdict.detail)
                    self._drop()
                    if not verdict.recoverable or round_ == self._config.publish_retries:
                        left = sum(len(w.jobs) for w in wakeups[done:])
                        raise PublishFailed(
                            f"publishing wake-ups for {left} jobs failed ({verdict.kind}): {detail}"
                        ) from None
                    log.info("publisher connection lost (%s); reconnecting once", detail)

    def wakeups(self, jobs: Sequence[Job]) -> list[Outgoing]:
        """The messages announcing `jobs`: per queue, in order of first appearance, up to
        `wakeup_ids` ids and `max_message_bytes` each; a lone job gets a version-1 message
        with its hints. Jobs whose wake-up cannot be made are skipped (logged once) and
        never fail the others."""
        by_queue: dict[str, list[Job]] = {}
        for job in jobs:
            if not self.skipped.blocked(job.id):
                by_queue.setdefault(job.queue, []).append(job)
        out: list[Outgoing] = []
        for waiting in by_queue.values():
            try:
                routing_key = self._routing_key(waiting[0])
            except Unpublishable as err:
                for job in waiting:
                    self.skipped.note(job, err.reason, blocked=True)
                continue
            for group in self._groups(waiting):
                if len(group) == 1:
                    try:
                        out.append(Outgoing((group[0],), *self._wakeup(group[0], routing_key)))
                    except Unpublishable as err:
                        self.skipped.note(group[0], err.reason, blocked=True)
                    continue
                body = messages.encode_many([j.id for j in group])
                properties = pika.BasicProperties(
                    content_type=messages.CONTENT_TYPE,
                    delivery_mode=pika.DeliveryMode.Persistent,
                    message_id=_short(group[0].id),
                )
                out.append(Outgoing(tuple(group), routing_key, body, properties))
        return out

    def _groups(self, jobs: list[Job]) -> list[list[Job]]:
        """`jobs` cut into groups of at most `wakeup_ids` whose message fits the size bound."""
        most = self._config.wakeup_ids
        budget = self._config.max_message_bytes - _MANY_OVERHEAD
        groups: list[list[Job]] = []
        group: list[Job] = []
        used = 0
        for job in jobs:
            cost = len(json.dumps(job.id).encode("utf-8")) + 1
            if group and (len(group) >= most or used + cost > budget):
                groups.append(group)
                group, used = [], 0
            group.append(job)
            used += cost
        if group:
            groups.append(group)
        return groups

    def _routing_key(self, job: Job) -> str:
        try:
            routing_key = self._config.queue_name(job.queue)
        except BadInput as err:
            raise Unpublishable(job, f"its queue name is not valid here ({err})") from None
        problem = messages.short_string_problem("the routing key (queue name)", routing_key)
        if problem is not None:
            raise Unpublishable(job, problem)
        return routing_key

    def _wakeup(self, job: Job, routing_key: str) -> tuple[str, bytes, Any]:
        """Routing key, body and properties of `job`'s version-1 wake-up, or Unpublishable.

        The properties are hints: one AMQP cannot carry (a `correlation_id` over 255
        bytes, a lone surrogate) is left out, and the body still names the job.
        """
        try:
            body = messages.encode(job)
        except (TypeError, ValueError) as err:
            raise Unpublishable(job, f"its hint is not JSON ({err})") from None
        hints = {"message_id": job.id, "correlation_id": job.correlation_id, "type": job.kind}
        for name, value in list(hints.items()):
            problem = messages.short_string_problem(name, value)
            if problem is not None:
                self.skipped.note(job, f"{problem}; sent without it", blocked=False)
                hints[name] = None
        properties = pika.BasicProperties(
            content_type=messages.CONTENT_TYPE,
            delivery_mode=pika.DeliveryMode.Persistent,
            **hints,
        )
        return routing_key, body, properties

    def _publish_batch(self, channel: Any, batch: list[Outgoing]) -> None:
        sent: list[Outgoing] = []
        for wakeup in batch:
            try:
                channel.basic_publish(
                    exchange="",
                    routing_key=wakeup.routing_key,
                    body=wakeup.body,
                    properties=wakeup.properties,
                    mandatory=True,
                )
            except _ENCODING_ERRORS as err:  # pika encodes a frame fully before sending it
                for job in wakeup.jobs:
                    self.skipped.note(job, f"{type(err).__name__}: {err}", blocked=True)
                continue
            sent.append(wakeup)
        if not sent:
            return
        returned = self._commit(channel)
        self.published += sum(len(w.jobs) for w in sent if w.message_id not in returned)
        if returned:
            lost = [w for w in sent if w.message_id in returned] or sent[:1]
            count = sum(len(w.jobs) for w in lost)
            raise self._unroutable(lost[0].jobs[0].id, lost[0].jobs[0].queue, count)

    def _publish_confirmed(self, wakeup: Outgoing) -> None:
        job = wakeup.jobs[0]
        try:
            self._single.basic_publish(
                exchange="",
                routing_key=wakeup.routing_key,
                body=wakeup.body,
                properties=wakeup.properties,
                mandatory=True,
            )
        except _ENCODING_ERRORS as err:
            for each in wakeup.jobs:
                self.skipped.note(each, f"{type(err).__name__}: {err}", blocked=True)
            return
        except pika_errors.UnroutableError as err:
            raise self._unroutable(job.id, job.queue, len(wakeup.jobs)) from err
        except pika_errors.NackError as err:
            raise PublishFailed(
                f"the broker refused (nacked) the wake-up for job {job.id}"
                + (f" and {len(wakeup.jobs) - 1} more" if len(wakeup.jobs) > 1 else "")
            ) from err
        self.published += len(wakeup.jobs)

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
                properties=messages.dead_letter_properties(reason, queue_name),
            )
            self._commit(channel)

    def ready_counts(self, queues: Iterable[str]) -> dict[str, int]:
        """Messages waiting (ready, not delivered) in each queue's broker queue."""
        with self._lock:
            try:
                return topology.declare_queues(self._ensure(), self._config, queues)
            except Exception as err:
                self._drop()
                detail = self._config.scrub(classify(err).detail)
                raise PublishFailed(f"reading queue depths failed: {detail}") from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()
