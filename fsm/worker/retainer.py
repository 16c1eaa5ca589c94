"""The retention thread: prunes finished jobs past their retention on a timer
(`fsm.service.maintenance.retention.Retention`, docs/retention.md).

A worker runs it only when given a retention plan (`Worker(retention=...)`, `jobfsm
worker --retain STATE=DURATION`). However many workers run one, the holder of the
store's service lease prunes and the others' passes do nothing. The first pass is at
start, then one every `plan.every` seconds (jittered by ±10 %). It stops as soon as the
worker starts draining, and gives the lease up so another worker takes over at once.
"""

from __future__ import annotations

import logging
import random

from ..service.maintenance.report import Report
from ..service.maintenance.retention import Retention, RetentionPlan
from .state import Shared, backoff

log = logging.getLogger(__name__)


class Retainer:
    def __init__(self, shared: Shared, plan: RetentionPlan) -> None:
        self.s = shared
        self.service = Retention(shared.engine, plan, owner=shared.owner_name)
        self.last: Report | None = None

    def loop(self) -> None:
        s = self.s
        every = self.service.plan.every
        errors = 0
        try:
            while not s.stopping.is_set():
                pause = every * random.uniform(0.9, 1.1)
                try:
                    self.last = self.service.run_once()
                    errors = 0
                except Exception as err:
                    errors += 1
                    log.warning("worker %s: retention pass failed: %s", s.owner_name, err)
                    pause = max(pause, backoff(errors))
                if s.stopping.wait(pause):
                    break
        finally:
            try:
                self.service.stop()
            except Exception as err:  # the lease lapses by itself
                log.info("worker %s: retention lease not given up: %s", s.owner_name, err)
