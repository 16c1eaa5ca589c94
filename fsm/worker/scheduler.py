"""The scheduler thread: submits the due ticks of every schedule (`fsm.scheduling`).

Every worker runs one unless told not to (`Worker(scheduler=False)`, `jobfsm worker
--no-scheduler`); however many run, each tick is submitted once (`fsm.scheduling`
says how). At start it stores the schedules declared in code; then every `interval`
seconds (jittered by ±10 %) it makes one bounded pass. It stops as soon as the
worker starts draining: a draining worker submits nothing new.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

from ..schedules import Schedule
from ..scheduling import PassReport, Schedules
from .state import Shared, backoff

log = logging.getLogger(__name__)

#: seconds between two passes of a worker's scheduler
DEFAULT_SCHEDULE_INTERVAL = 1.0


class Scheduler:
    def __init__(self, shared: Shared, declared: Iterable[Schedule], interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"schedule_interval must be positive, got {interval!r}")
        self.s = shared
        self.declared = tuple(declared)
        self.interval = interval
        self.schedules = Schedules(shared.engine)
        self.last: PassReport | None = None

    def loop(self) -> None:
        s = self.s
        errors = 0
        declared = False
        while not s.stopping.is_set():
            try:
                if not declared:
                    self.schedules.declare(self.declared)
                    declared = True
                self.last = self.schedules.run_pass()
                errors = 0
            except Exception as err:
                errors += 1
                log.warning("worker %s: scheduler pass failed: %s", s.owner_name, err)
                if s.stopping.wait(backoff(errors)):
                    break
            if s.stopping.wait(self.interval * random.uniform(0.9, 1.1)):
                break
