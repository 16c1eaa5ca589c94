"""What the worker's thread roles share: the engine, the runs, the stop signals.

Each role (claims, reports, leases, sweeps) owns its own loop and reads or sets
only what is here; none reaches into another role's attributes. The stop order
is the orchestrator's (`fsm.worker.main`).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from ..errors import StoreError
from ..ports import Executor, Liveness, Outcome, Wakeable, WorkerDelivery
from ..service.engine import Engine
from ..service.identity import Identity
from .handlers import Handlers
from .runs import Run, Runs

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_START = 0.05  # first pause after a store error in a loop
BACKOFF_CAP = 5.0  # longest pause after repeated store errors
#: leases a worker holds per slot at most: one whose handler runs, and one whose
#: handler returned and whose outcome waits for its report (the next claim does not
#: wait for the report's commit)
HELD_PER_SLOT = 2


def backoff(step: int) -> float:
    """Pause after `step` consecutive errors: exponential, capped, jittered."""
    return float(min(BACKOFF_CAP, BACKOFF_START * 2.0**step) * random.uniform(0.5, 1.0))


class Shared:
    """State shared by the worker's roles; flags are plain attributes, signals Events."""

    def __init__(
        self,
        engine: Engine,
        identity: Identity,
        handlers: Handlers,
        *,
        concurrency: int,
        poll_interval: float,
        queues: tuple[str, ...],
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self.engine = engine
        #: this worker's own limits (`--limit`): limit key -> most jobs of it held at once
        self.limits = dict(limits or {})
        self.queues = queues
        self.identity = identity
        self.handlers = handlers
        self.concurrency = concurrency
        #: the most runs held at once: running, or returned and not yet reported
        self.held_limit = concurrency * HELD_PER_SLOT
        self.poll_interval = poll_interval
        self.executor: Executor | None = None
        self.delivery: WorkerDelivery | None = None
        self.liveness: Liveness | None = None
        self.runs = Runs(identity)
        # C-implemented: a put and a get cost a fraction of queue.Queue's (one of each per job)
        self.outcomes: queue.SimpleQueue[tuple[Run, Outcome]] = queue.SimpleQueue()
        self.stopping = threading.Event()  # no new leases; drain
        self.hard_stop = threading.Event()  # no drain: stop now
        self.liveness_lost = threading.Event()
        self.quiet = threading.Event()  # the heartbeat and sweeper stop
        self.started = threading.Event()
        self.finished = threading.Event()
        self.store_ok = False
        #: the last claim failed: a sweep that works does not make the worker ready
        self.claim_failing = False

    @property
    def owner_name(self) -> str:
        return str(self.identity.owner)

    def settle(self, run: Run, outcome: Outcome) -> None:
        """Hand `run`'s outcome to the reporter; its slot is free from now on."""
        self.runs.end(run)
        self.outcomes.put((run, outcome))

    def wake(self) -> None:
        """Make the claim loop look for work now (recovered jobs are due at once)."""
        if isinstance(self.delivery, Wakeable):
            self.delivery.wake()

    def with_retries(self, what: str, call: Callable[[], T]) -> T | None:
        """Retry a store call with bounded backoff for at most one lease TTL.

        A retryable `StoreError` (a connection lost, a busy SQLite file) is tried
        again; past the bound, or on any other store error, None: the caller
        leaves the jobs to recovery (their leases lapse), it never guesses.
        """
        deadline = time.monotonic() + self.engine.policy.lease.ttl
        step = 0
        while True:
            try:
                out = call()
                self.store_ok = True
                return out
            except StoreError as err:
                self.store_ok = False
                if not err.retryable or time.monotonic() >= deadline or self.hard_stop.is_set():
                    log.error("worker %s: %s failed: %s", self.owner_name, what, err)
                    return None
                log.warning("worker %s: %s failed, retrying: %s", self.owner_name, what, err)
                time.sleep(backoff(step))
                step += 1
