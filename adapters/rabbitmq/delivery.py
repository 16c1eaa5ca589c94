"""RabbitDelivery: the broker as a doorbell, the store as the truth."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from fsm.engine import Engine, check_name
from fsm.ports import Wakeup
from fsm.records import Job

from .config import RabbitConfig
from .consumer import Consumer, Token
from .errors import DeliveryFailed
from .messages import PoisonMessage, decode
from .publisher import Publisher
from .repair import Repairer

log = logging.getLogger(__name__)


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
        self.publisher = Publisher(config)
        self.consumer = Consumer(config)
        self.repairer = None if engine is None else Repairer(engine, self.publisher, config)
        self._queues: tuple[str, ...] = ()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # --- publishing (any thread) ------------------------------------------------------

    def publish(self, jobs: Sequence[Job]) -> None:
        """Publish wake-ups for committed jobs; raises PublishFailed (the jobs stay queued)."""
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

    def start(self, queues: Sequence[str]) -> None:
        self._queues = tuple(check_name("queue", q) for q in queues)
        if not self._queues:
            raise ValueError("RabbitDelivery.start needs at least one queue")
        self.consumer.start(self._queues)
        if self.repairer is not None:
            self._sweeper = threading.Thread(
                target=self._sweep_loop, name="jobfsm-rabbitmq-repair", daemon=True
            )
            self._sweeper.start()

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        self.check()
        if capacity < 1:
            return []
        self.consumer.want_prefetch(capacity)
        wakeups: list[Wakeup] = []
        for item in self.consumer.take(capacity, timeout):
            try:
                hint = decode(item.body, limit=self.config.max_message_bytes)
                job_id = str(hint["job_id"])
                if self.engine is not None and self.engine.store.get(job_id) is None:
                    raise PoisonMessage(f"unknown job {job_id!r}")
            except PoisonMessage as err:
                log.warning(
                    "dead-lettering a message from queue %r: %s",
                    self.config.queue_name(item.token.queue) if item.token.queue else "?",
                    err.reason,
                )
                self.consumer.dead_letter(item.token, item.body, err.reason)
                continue
            wakeups.append(Wakeup(job_id, item.token))
        return wakeups

    def settle(self, wakeup: Wakeup) -> None:
        """Ack the delivery: the job is durably leased, or it was not claimable."""
        token = wakeup.token
        if not isinstance(token, Token):
            raise ValueError(f"settle() got a wake-up RabbitDelivery did not hand out: {wakeup}")
        if self.config.ack_on_settle:
            self.consumer.ack(token)

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

    def close(self) -> None:
        self._stop.set()
        self.consumer.close()
        if self._sweeper is not None:
            self._sweeper.join(self.config.connect_timeout * 4 + 5)
        self.publisher.close()


__all__ = ["DeliveryFailed", "RabbitDelivery"]
