"""Asynchronous publishing: `publish` returns once the wake-ups are queued in memory.

Why: `Engine.submit` publishes after its commit and, whatever happens, only logs
a failure (the store is the truth and the repair sweep republishes). Waiting for
the broker inside submit therefore buys the caller nothing but latency. Here a few
sender threads, each with its own connection (pika connections are not
thread-safe), take wake-ups from a bounded in-memory queue and publish what is
waiting, up to `publish_batch` messages of up to `wakeup_ids` job ids at a time, in
one AMQP transaction with `mandatory`: one durable commit per batch instead of one
confirm per message, and one message per `wakeup_ids` jobs of a queue instead of one
per job. Several connections keep several commits in flight.

Every failure (unroutable, connection lost after the retry) is logged and the job
ids of the batch are kept, boundedly, for the next repair sweep, which republishes it at
once instead of after `repair_after`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence

from fsm.records import Job

from .config import RabbitConfig
from .publisher import Publisher, Skipped

log = logging.getLogger(__name__)

#: failed job ids kept for the repair sweep; beyond it the sweep's scan still finds them
LOST_LIMIT = 10_000


class Outbox:
    """A bounded queue of wake-ups and `config.publisher_threads` sender threads."""

    def __init__(self, config: RabbitConfig, skipped: Skipped | None = None) -> None:
        self._config = config
        self._skipped = Skipped() if skipped is None else skipped
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=config.outbox_limit)
        self._threads: list[threading.Thread] = []
        self._publishers: list[Publisher] = []
        self._lock = threading.Lock()
        self._closed = False
        self.lost: deque[str] = deque(maxlen=LOST_LIMIT)
        self.dropped = 0
        self.failed = 0

    def _start(self) -> None:
        with self._lock:
            if self._threads or self._closed:
                return
            for n in range(self._config.publisher_threads):
                publisher = Publisher(self._config, self._skipped)
                thread = threading.Thread(
                    target=self._send_loop,
                    args=(publisher,),
                    name=f"jobfsm-rabbitmq-publish-{n}",
                    daemon=True,
                )
                self._publishers.append(publisher)
                self._threads.append(thread)
                thread.start()

    def put(self, jobs: Sequence[Job]) -> None:
        """Queue one wake-up per job; a full outbox drops (and remembers) the rest."""
        self._start()
        for job in jobs:
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self.dropped += 1
                self.lost.append(job.id)
                log.warning(
                    "RabbitMQ outbox full (%d); wake-up of job %s left to the repair sweep",
                    self._config.outbox_limit,
                    job.id,
                )

    def _take(self, first: Job) -> tuple[list[Job], bool]:
        """`first` and what else is queued now, up to one batch; True if a stop was taken."""
        batch = [first]
        most = self._config.publish_batch * self._config.wakeup_ids
        while len(batch) < most:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    def _send_loop(self, publisher: Publisher) -> None:
        idle = self._config.heartbeat / 2
        while True:
            try:
                first = self._queue.get(timeout=idle)
            except queue.Empty:
                publisher.keepalive()  # answer heartbeats so the broker keeps the connection
                continue
            if first is None:
                self._queue.task_done()
                return
            batch, stop = self._take(first)
            try:
                publisher.publish(batch)
            except Exception as err:
                self.failed += len(batch)
                self.lost.extend(job.id for job in batch)
                log.warning("wake-ups of %d jobs not published: %s", len(batch), err)
            finally:
                for _ in range(len(batch) + stop):
                    self._queue.task_done()
            if stop:
                return

    def flush(self, timeout: float) -> bool:
        """Wait until every queued wake-up was published or failed; False on timeout."""
        deadline = time.monotonic() + timeout
        done = self._queue.all_tasks_done
        with done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0 or not done.wait(left):
                    return self._queue.unfinished_tasks == 0
        return True

    def close(self, timeout: float) -> None:
        """Publish what is queued (within `timeout`), then stop the senders."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if not threads:
            return
        if not self.flush(timeout):
            log.warning("RabbitMQ outbox closed with wake-ups unsent; the repair sweep has them")
        for _ in threads:
            try:
                self._queue.put(None, timeout=1.0)
            except queue.Full:
                break
        for thread in threads:
            thread.join(timeout)
        for publisher in self._publishers:
            publisher.close()
