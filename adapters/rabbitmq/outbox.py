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

The queue holds jobs, but its lock is taken once per `put` and once per batch a
sender takes, never once per job: a submitter's batch of 1,000 jobs costs one hand-off,
not 1,000 lock round trips contended by every sender thread (which cost the submitting
process about as much CPU per job as its own submit).

Every failure (unroutable, connection lost after the retry) is logged and the job
ids of the batch are kept, boundedly, for the next repair sweep, which republishes it at
once instead of after `repair_after`.
"""

from __future__ import annotations

import logging
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
    """At most `config.outbox_limit` queued wake-ups and `config.publisher_threads` senders."""

    def __init__(self, config: RabbitConfig, skipped: Skipped | None = None) -> None:
        self._config = config
        self._skipped = Skipped() if skipped is None else skipped
        #: one batch a sender takes at most: `publish_batch` messages of `wakeup_ids` ids
        self._most = config.publish_batch * config.wakeup_ids
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # senders wait here for jobs
        self._done = threading.Condition(self._lock)  # flush waits here for an empty outbox
        self._waiting: deque[Job] = deque()  # bounded by outbox_limit (put drops the rest)
        self._sending = 0  # jobs taken by a sender whose publish has not ended
        self._threads: list[threading.Thread] = []
        self._publishers: list[Publisher] = []
        self._closed = False
        self.lost: deque[str] = deque(maxlen=LOST_LIMIT)
        self.dropped = 0
        self.failed = 0

    @property
    def publishers(self) -> tuple[Publisher, ...]:
        """The sender threads' publishers, one connection each (started by the first put)."""
        with self._lock:
            return tuple(self._publishers)

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
        with self._lock:
            room = max(0, self._config.outbox_limit - len(self._waiting))
            taken = jobs[:room]
            self._waiting.extend(taken)
            over = jobs[len(taken) :]
            if over:
                self.dropped += len(over)
                self.lost.extend(job.id for job in over)
            if taken:  # enough senders for the batches just queued
                self._work.notify(-(-len(self._waiting) // self._most))
        if over:
            log.warning(
                "RabbitMQ outbox full (%d); wake-ups of %d job(s) (the first %s) left to the "
                "repair sweep",
                self._config.outbox_limit,
                len(over),
                over[0].id,
            )

    def _take(self) -> list[Job] | None:
        """The next batch, waiting up to half a heartbeat for one: [] when that passed
        with nothing queued (time to answer heartbeats), None once closed and empty.
        Half a heartbeat in all: a sender woken for jobs another took first waits
        only for what is left of it, so its connection is kept alive all the same."""
        until = time.monotonic() + self._config.heartbeat / 2
        with self._lock:
            while not self._waiting:
                if self._closed:
                    return None
                left = until - time.monotonic()
                if left <= 0 or (not self._work.wait(left) and not self._waiting):
                    return []
            n = min(self._most, len(self._waiting))
            self._sending += n
            return [self._waiting.popleft() for _ in range(n)]

    def _send_loop(self, publisher: Publisher) -> None:
        while (batch := self._take()) is not None:
            if not batch:
                publisher.keepalive()  # answer heartbeats so the broker keeps the connection
                continue
            failed = False
            try:
                publisher.publish(batch)
            except Exception as err:
                failed = True
                log.warning("wake-ups of %d jobs not published: %s", len(batch), err)
            finally:
                with self._lock:
                    if failed:
                        self.failed += len(batch)
                        self.lost.extend(job.id for job in batch)
                    self._sending -= len(batch)
                    if not self._sending and not self._waiting:
                        self._done.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued wake-up was published or failed; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._waiting or self._sending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout: float) -> None:
        """Publish what is queued (within `timeout`), then stop the senders."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            self._work.notify_all()  # senders end once nothing is queued
        if not threads:
            return
        if not self.flush(timeout):
            log.warning("RabbitMQ outbox closed with wake-ups unsent; the repair sweep has them")
        for thread in threads:
            thread.join(timeout)
        for publisher in self._publishers:
            publisher.close()
