"""RabbitDelivery: the broker as a doorbell, the store as the truth."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from fsm.inputs import check_name
from fsm.ports import Wakeup
from fsm.records import Job
from fsm.service.engine import Engine

from .config import RabbitConfig
from .consumer import Consumer
from .errors import DeliveryFailed
from .messages import PoisonMessage, decode, id_only
from .outbox import Outbox
from .parts import Part, Parts
from .publisher import Publisher, Skipped
from .repair import Repairer
from .settling import Token

log = logging.getLogger(__name__)

#: wake-ups awaiting the unknown-job check at most; beyond, the oldest go unchecked
VERIFY_LIMIT = 10_000


class RabbitDelivery:
    """A `fsm.ports.WorkerDelivery` over RabbitMQ (pika).

    `RabbitDelivery(url, engine=engine, **options)`; options are the fields of
    `RabbitConfig`. With an `engine`, `start` also runs the repair sweep and
    messages naming a job the store does not know are dead-lettered.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        config: RabbitConfig | None = None,
        **options: Any,
    ) -> None:
        if config is None:
            config = RabbitConfig(**options) if url is None else RabbitConfig(url=url, **options)
        elif url is not None or options:
            raise ValueError("pass either config= or url/options to RabbitDelivery, not both")
        self.config = config
        self.engine = engine
        #: wake-ups that cannot be published as they are (shared: each is logged once)
        self.skipped = Skipped()
        self.publisher = Publisher(config, self.skipped)
        self.outbox = Outbox(config, self.skipped)
        self.consumer = Consumer(config, self._recovered)
        #: the ids of multi-job messages, handed out as free slots allow
        self._parts = Parts(self.consumer)
        self.repairer = (
            None if engine is None else Repairer(engine, self.publisher, config, self.outbox.lost)
        )
        self._queues: tuple[str, ...] = ()
        # Unknown-job checks run after settle, off the claim loop (one store read each).
        self._verifying = engine is not None and config.verify_job_ids
        # Only job ids wait for the check, never message bodies (bounded by VERIFY_LIMIT).
        self._unverified: dict[Token | Part, str] = {}
        self._to_verify: deque[tuple[str, str]] = deque(maxlen=VERIFY_LIMIT)
        self._verify_wanted = threading.Event()
        self.unknown_jobs = 0
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._verifier: threading.Thread | None = None

    # --- publishing (any thread) ------------------------------------------------------

    def publish(self, jobs: Sequence[Job], *, wait: bool | None = None) -> None:
        """Announce committed jobs.

        By default (`publish_wait=False`) the wake-ups are queued for the sender
        threads and this returns at once; failures are logged and repaired. With
        `wait=True` it returns once the broker confirmed every one, or raises
        PublishFailed (unroutable, nacked, broker gone); the jobs stay queued.
        """
        if not (self.config.publish_wait if wait is None else wait):
            self.outbox.put(jobs)
            return
        try:
            self.publisher.publish(jobs)
        except Exception:
            log.warning(
                "publishing wake-ups for %d jobs failed; the repair sweep republishes them",
                len(jobs),
                exc_info=True,
            )
            raise

    # --- the worker side --------------------------------------------------------------

    def _recovered(self, reason: str) -> None:
        metrics = None if self.engine is None else self.engine.metrics
        if metrics is not None:
            metrics.delivery_recovery("rabbitmq", reason)

    def start(self, queues: Sequence[str]) -> None:
        self._queues = tuple(check_name("queue", q) for q in queues)
        if not self._queues:
            raise ValueError("RabbitDelivery.start needs at least one queue")
        self.consumer.start(self._queues)
        if self.repairer is None:
            log.warning(
                "RabbitDelivery started without an engine: no repair sweep, so lost wake-ups, "
                "due retries and recovered jobs of %s are never announced; pass engine=",
                list(self._queues),
            )
        if self.repairer is not None:
            self._sweeper = threading.Thread(
                target=self._sweep_loop, name="jobfsm-rabbitmq-repair", daemon=True
            )
            self._sweeper.start()
        if self._verifying:
            self._verifier = threading.Thread(
                target=self._verify_loop, name="jobfsm-rabbitmq-verify", daemon=True
            )
            self._verifier.start()

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        """At most `capacity` wake-ups: first the ids left over from multi-job messages
        (`Parts`), then new messages, taken one at a time until `capacity` ids are had.
        Waits up to `timeout` only when nothing at all is at hand."""
        self.check()
        if capacity < 1:
            return []
        self.consumer.want_prefetch(capacity)
        wakeups = self._parts.take(capacity)
        wait = timeout if not wakeups else 0.0
        while len(wakeups) < capacity:
            items = self.consumer.take(1, wait)
            if not items:
                break
            wait = 0.0
            item = items[0]
            try:
                job_ids = decode(item.body, limit=self.config.max_message_bytes)
            except Exception as err:  # any message that is not a wake-up fails alone, at once
                reason = (
                    err.reason
                    if isinstance(err, PoisonMessage)
                    else (f"message could not be read ({type(err).__name__}: {err})")
                )
                log.warning(
                    "dead-lettering a message from queue %r: %s",
                    self.config.queue_name(item.token.queue) if item.token.queue else "?",
                    reason,
                )
                self.consumer.dead_letter(item.token, item.body, reason)
                continue
            if len(job_ids) == 1:
                wakeups.append(Wakeup(job_ids[0], item.token))
            else:
                self._parts.add(item.token, job_ids)
                wakeups += self._parts.take(capacity - len(wakeups))
        if self._verifying:
            for wakeup in wakeups:
                assert wakeup.job_id is not None
                assert isinstance(wakeup.token, Token | Part)
                self._unverified[wakeup.token] = wakeup.job_id
            while len(self._unverified) > VERIFY_LIMIT:
                del self._unverified[next(iter(self._unverified))]
        return wakeups

    def settle(self, wakeup: Wakeup, claimed: bool = False) -> None:
        """Ack the delivery once the job is durably leased, or was not claimable; a
        multi-job message once every job it names is settled.

        A wake-up that led to no lease is checked later against the store (an
        unknown job id is dead-lettered); a claimed one needs no check.
        """
        token = wakeup.token
        if isinstance(token, Part):
            message = self._parts.settle(token)
            if message is not None and self.config.ack_on_settle:
                self.consumer.ack(message)
        elif isinstance(token, Token):
            if self.config.ack_on_settle:
                self.consumer.ack(token)
        else:
            raise ValueError(f"settle() got a wake-up RabbitDelivery did not hand out: {wakeup}")
        job_id = self._unverified.pop(token, None) if self._verifying else None
        if job_id is not None and not claimed:
            self._to_verify.append((job_id, token.queue))
            self._verify_wanted.set()

    def held_for_check(self) -> list[str | tuple[str, str]]:
        """What waits for the unknown-job check, as held: the job id of each wake-up
        polled and not settled yet, then the (job id, queue) of each settled one queued
        for the check. Job ids only, never message bodies (both bounded by VERIFY_LIMIT).
        Call it from the polling thread."""
        return [*self._unverified.values(), *self._to_verify]

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until queued wake-ups are published (or failed); False on timeout."""
        return self.outbox.flush(self.config.publish_timeout if timeout is None else timeout)

    def wake(self) -> None:
        """Interrupt a blocked `poll` (the Worker calls it when it stops)."""
        self.consumer.wake()

    @property
    def ready(self) -> bool:
        return self.consumer.ready

    def check(self) -> None:
        failure = self.consumer.failure
        if failure is not None:
            raise failure

    def repair(self, queues: Sequence[str] | None = None) -> int:
        """One repair sweep over `queues` (default: the started ones); needs an engine."""
        if self.repairer is None:
            raise ValueError("RabbitDelivery.repair needs an engine (RabbitDelivery(engine=...))")
        names = self._queues if queues is None else tuple(check_name("queue", q) for q in queues)
        return self.repairer.sweep(names)

    def _sweep_loop(self) -> None:
        while not self._stop.wait(self.config.repair_interval):
            try:
                self.repair()
            except Exception:  # a failed sweep is retried at the next interval
                log.warning("RabbitMQ repair sweep failed", exc_info=True)

    def _verify_loop(self) -> None:
        assert self.engine is not None
        while not self._stop.is_set():
            self._verify_wanted.wait(1.0)
            self._verify_wanted.clear()
            while self._to_verify:
                job_id, queue = self._to_verify.popleft()
                try:
                    if self.engine.store.get(job_id) is not None:
                        continue
                    reason = f"unknown job {job_id!r}"
                    log.warning("dead-lettering a wake-up from queue %r: %s", queue, reason)
                    name = self.config.queue_name(queue)
                    self.publisher.dead_letter(id_only(job_id), reason, name)
                    self.unknown_jobs += 1
                except Exception:  # a store or broker hiccup: the message was already acked
                    log.warning("checking the wake-up of job %s failed", job_id, exc_info=True)

    def close(self) -> None:
        self._stop.set()
        self._verify_wanted.set()
        self.consumer.close()
        if self._sweeper is not None:
            self._sweeper.join(self.config.connect_timeout * 4 + 5)
        if self._verifier is not None:
            self._verifier.join(self.config.publish_timeout)
        self.outbox.close(self.config.publish_timeout)
        self.publisher.close()


__all__ = ["DeliveryFailed", "RabbitDelivery"]
