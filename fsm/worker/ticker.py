"""The scheduler thread (`Scheduler`): submits the due ticks of every schedule.

Every worker runs one unless told not to (`Worker(scheduler=False)`, `jobfsm worker
--no-scheduler`); however many run, one leads the passes and each tick is submitted
once (`fsm.service.maintenance.ticks` says how). At start it stores the schedules
declared in code; then every `interval` seconds (jittered by ±10 %) it makes one
bounded pass, and at once another while a schedule is behind. A worker without its
scheduler still runs this thread, only to tell the store which kinds it handles (a
schedule whose kind no live worker handles is logged). It stops as soon as the worker
starts draining (a draining worker submits nothing new), giving up its lead.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

from ..service.maintenance.report import Report
from ..service.maintenance.ticks import BEAT_EVERY, LEAD_FOR, Ticks
from ..service.schedules import Schedule, Schedules
from .state import Shared, backoff

log = logging.getLogger(__name__)

#: seconds between two passes of a worker's scheduler
DEFAULT_SCHEDULE_INTERVAL = 1.0
#: the longest pass interval: a leader renews its lead (LEAD_FOR) at every other pass,
#: and passes must come well within the lateness bound (docs/schedules.md)
MAX_SCHEDULE_INTERVAL = LEAD_FOR / 2


class Scheduler:
    def __init__(
        self,
        shared: Shared,
        declared: Iterable[Schedule],
        interval: float,
        *,
        passes: bool = True,
    ) -> None:
        if not 0 < interval <= MAX_SCHEDULE_INTERVAL:
            raise ValueError(
                f"schedule_interval must be more than 0 and at most {MAX_SCHEDULE_INTERVAL:g} "
                f"seconds, got {interval!r}"
            )
        self.s = shared
        self.declared = tuple(declared)
        self.interval = interval
        #: False: only tell the store this worker's kinds (`--no-scheduler`)
        self.passes = passes
        self.schedules = Schedules(shared.engine)
        self.ticks = Ticks(shared.engine, owner=shared.owner_name, kinds=shared.handlers)
        self.last: Report | None = None

    def loop(self) -> None:
        s = self.s
        errors = 0
        declared = False
        try:
            while not s.stopping.is_set():
                pause = self.interval * random.uniform(0.9, 1.1)
                try:
                    self.ticks.kinds = tuple(sorted(s.handlers))  # handlers added late count
                    if not self.passes:
                        self.ticks.beat()
                        pause = BEAT_EVERY * random.uniform(0.5, 0.9)
                    else:
                        if not declared:
                            self.schedules.declare(self.declared, by=f"code:{s.owner_name}")
                            declared = True
                        self.last = self.ticks.run_once()
                        if self.last.behind:
                            pause = 0.0  # a schedule is behind: the next pass now
                    errors = 0
                except Exception as err:
                    errors += 1
                    log.warning("worker %s: scheduler pass failed: %s", s.owner_name, err)
                    pause = max(pause, backoff(errors))
                if s.stopping.wait(pause):
                    break
        finally:
            self._give_up()

    def _give_up(self) -> None:
        try:
            self.ticks.stop()
        except Exception as err:  # the lead lapses by itself
            log.info("worker %s: scheduler lead not given up: %s", self.s.owner_name, err)
