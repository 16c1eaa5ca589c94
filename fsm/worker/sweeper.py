"""The sweeper thread: runs the recovery services (`fsm.service.maintenance`) on a timer.

Every `recovery.sweep_interval` (jittered by ±`SWEEP_JITTER`, 20 %, so many workers
do not sweep in step) it expires lapsed leases and the jobs of owners this process's
identity judges DEAD, and fails passed deadlines. Recovered jobs are due at once, so
the claim loop is woken. The jitter bounds how late a death is noticed: within 1.2
intervals, so recovery stays within 1.5 s of a kill -9 at the default 1 s (±50 % put
maxima at 1.5 s before the claim).
"""

from __future__ import annotations

import logging
import random

from ..service.maintenance import Report, Service, recovery_services, run
from ..service.reconcile import Asker
from .state import Shared, backoff

log = logging.getLogger(__name__)

#: the sweep's period is drawn from interval x [1 - SWEEP_JITTER, 1 + SWEEP_JITTER]
SWEEP_JITTER = 0.2


class Sweeper:
    def __init__(self, shared: Shared) -> None:
        self.s = shared
        self.last: Report | None = None
        #: reconcilers are asked on threads of their own: a sweep never waits on one
        self.asker = Asker()
        #: the services, built at the first sweep (when every handler is registered)
        #: and kept, so the release sweep's cursor walks on from pass to pass
        self.services: list[Service] | None = None

    def loop(self) -> None:
        s = self.s
        base = s.engine.policy.recovery.sweep_interval
        errors = 0
        while not s.quiet.wait(base * random.uniform(1 - SWEEP_JITTER, 1 + SWEEP_JITTER)):
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

    def sweep(self) -> Report:
        s = self.s
        if self.services is None:
            probe = None if s.liveness is None else s.liveness.probe
            self.services = recovery_services(
                s.engine,
                s.identity,
                probe,
                reconcilers=s.handlers.reconcilers(),
                asker=self.asker,
            )
        report = run(self.services)
        self.last = report
        if report.expired:
            s.wake()
        return report
