"""The sweeper thread: runs the one recovery sweep (`fsm.recovery.sweep`) on a timer.

Every `recovery.sweep_interval` (jittered by ±50 %, so many workers do not sweep
in step) it expires lapsed leases and the jobs of owners this process's identity
judges DEAD, and fails passed deadlines. Recovered jobs are due at once, so the
claim loop is woken.
"""

from __future__ import annotations

import logging
import random

from ..reconcile import Asker
from ..recovery import RecoveryReport, sweep
from .state import Shared, backoff

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, shared: Shared) -> None:
        self.s = shared
        self.last: RecoveryReport | None = None
        #: reconcilers are asked on threads of their own: a sweep never waits on one
        self.asker = Asker()

    def loop(self) -> None:
        s = self.s
        base = s.engine.policy.recovery.sweep_interval
        errors = 0
        while not s.quiet.wait(base * random.uniform(0.5, 1.5)):
            try:
                self.sweep()
                errors = 0
                if not s.claim_failing:
                    s.store_ok = True  # an idle worker (no claims) stays ready
            except Exception as err:
                s.store_ok = False
                errors += 1
                log.warning("worker %s: recovery sweep failed: %s", s.owner_name, err)
                s.quiet.wait(backoff(errors))

    def sweep(self) -> RecoveryReport:
        s = self.s
        probe = None if s.liveness is None else s.liveness.probe
        report = sweep(
            s.engine, s.identity, probe, reconcilers=s.handlers.reconcilers(), asker=self.asker
        )
        self.last = report
        if report.expired:
            s.wake()
        return report
