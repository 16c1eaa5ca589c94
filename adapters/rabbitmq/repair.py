"""The repair sweep: republish wake-ups that were lost, without flooding the broker.

A job needs a wake-up when it is waiting (queued or retry_wait) and due. A job
queued by submit had one published after commit; it is republished only once it
has been due `repair_after` seconds without being leased. Jobs that never had a
wake-up for their due time (delayed submits, retries, expired or released leases,
operator requeues) are republished as soon as they are due. Per queue, no more are
republished than the stale jobs outnumber the messages still ready in the broker
(the rest are presumably on their way), a job is not republished twice within
`repair_after`, and one sweep publishes at most `repair_batch` wake-ups.

Jobs whose wake-up failed to publish (the outbox keeps their ids, `Outbox.lost`) are
republished by the first sweep that reaches the broker, without waiting `repair_after`:
a sweep that fails (the broker still away) or whose batch is full keeps them for the
next. The liveness bound this gives is checked by the delivery's fault model
(`adapters/rabbitmq/testing.py`, promise A4).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence

from fsm.ports import ScanRequest
from fsm.records import Job
from fsm.service.engine import Engine

from .config import RabbitConfig
from .publisher import Publisher

log = logging.getLogger(__name__)

WAITING = ("queued", "retry_wait")
#: seconds between two warnings that jobs arrive without wake-ups
MISSING_WARN_EVERY = 300.0


def _announced_at_submit(job: Job) -> bool:
    """Submit published a wake-up for it and nothing has happened to it since."""
    return job.state == "queued" and job.version == 1 and job.run_after <= job.created_at


class Repairer:
    """Runs repair sweeps for some queues; remembers what it republished recently."""

    def __init__(
        self,
        engine: Engine,
        publisher: Publisher,
        config: RabbitConfig,
        lost: deque[str] | None = None,
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._config = config
        #: ids whose publish is known to have failed: republished at once, no deficit rule
        self._lost: deque[str] = deque() if lost is None else lost
        self._recent: dict[str, float] = {}  # job id -> monotonic time of republish
        self.republished = 0
        #: jobs found due past `repair_after` that were never leased after their submit:
        #: their wake-up never came (usually a submitter without a RabbitMQ publisher)
        self.unannounced = 0
        self._warned_at: float | None = None

    def stale(self, jobs: Sequence[Job], now: float) -> list[Job]:
        after = self._config.repair_after
        out = []
        for job in jobs:
            if job.state not in WAITING or job.run_after > now:
                continue
            if _announced_at_submit(job) and now - job.run_after < after:
                continue
            out.append(job)
        return sorted(out, key=lambda j: (j.run_after, j.id))

    def sweep(self, queues: Sequence[str]) -> int:
        """One sweep over `queues`; returns the number of wake-ups republished."""
        config = self._config
        now = self._engine.clock.now()
        tick = time.monotonic()
        self._recent = {k: t for k, t in self._recent.items() if tick - t < config.repair_after}
        jobs = self._engine.scan(
            ScanRequest(states=WAITING, queues=tuple(queues), limit=config.repair_scan_limit)
        )
        known_lost = self._known_lost(queues, now)
        try:
            return self._republish(jobs, known_lost, queues, now, tick)
        except Exception:
            # the broker is still away: what was known lost stays known for the next
            # sweep (republished at once then), not left to the `repair_after` rule
            self._keep([j.id for j in known_lost])
            raise

    def _republish(
        self,
        jobs: Sequence[Job],
        known_lost: list[Job],
        queues: Sequence[str],
        now: float,
        tick: float,
    ) -> int:
        config = self._config
        lost_ids = {j.id for j in known_lost}
        skipped = self._publisher.skipped
        stale = [
            j
            for j in self.stale(jobs, now)
            if j.id not in self._recent and j.id not in lost_ids and not skipped.blocked(j.id)
        ]
        self._warn_unannounced([j for j in stale if _announced_at_submit(j)], tick)
        if not stale and not known_lost:
            return 0
        by_queue: dict[str, list[Job]] = {}
        for job in stale:
            by_queue.setdefault(job.queue, []).append(job)
        ready = self._publisher.ready_counts(sorted(by_queue)) if by_queue else {}
        chosen: list[Job] = list(known_lost)
        for queue, waiting in sorted(by_queue.items()):
            deficit = len(waiting) - ready.get(queue, 0)
            chosen.extend(waiting[: max(deficit, 0)])
        chosen = sorted(chosen, key=lambda j: (j.run_after, j.id))[: config.repair_batch]
        left = [j.id for j in known_lost if j not in chosen]  # past this sweep's batch
        self._keep(left)
        if not chosen:
            return 0
        self._publisher.publish(chosen)
        for job in chosen:
            self._recent[job.id] = tick
        self.republished += len(chosen)
        log.info("repair sweep republished %d lost or missing wake-ups", len(chosen))
        return len(chosen)

    def _keep(self, ids: Sequence[str]) -> None:
        """Known lost ids this sweep did not republish: first in line for the next."""
        self._lost.extendleft(reversed(ids))

    def _warn_unannounced(self, jobs: Sequence[Job], tick: float) -> None:
        """Say (at most every MISSING_WARN_EVERY s) that jobs arrive without wake-ups."""
        if not jobs:
            return
        self.unannounced += len(jobs)
        if self._warned_at is not None and tick - self._warned_at < MISSING_WARN_EVERY:
            return
        self._warned_at = tick
        queues = ", ".join(sorted({j.queue for j in jobs}))
        log.warning(
            "%d job(s) of queue(s) %s arrived without a RabbitMQ wake-up and waited %.0f s "
            "for this repair sweep: the processes that submit them publish none. Give their "
            "Engine a publisher (Engine(store, publisher=RabbitDelivery(url))) so workers "
            "hear of jobs at once (docs/rabbitmq.md, 'Submitters and workers')",
            len(jobs),
            queues,
            self._config.repair_after,
        )

    def _known_lost(self, queues: Sequence[str], now: float) -> list[Job]:
        """Waiting, due jobs of `queues` whose wake-up failed to publish (at most a batch)."""
        out: list[Job] = []
        while self._lost and len(out) < self._config.repair_batch:
            job = self._engine.store.get(self._lost.popleft())
            if job is None or job.state not in WAITING or job.queue not in queues:
                continue  # leased, finished or pruned since: nothing to announce
            if self._publisher.skipped.blocked(job.id):
                continue  # no wake-up can be made for it (logged once when found)
            if job.run_after <= now:
                out.append(job)  # not due yet: the stale rule announces it once due
        return out
