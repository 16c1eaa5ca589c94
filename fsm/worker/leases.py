"""The heartbeat thread: renews every held lease at once, and acts on what it learns.

- the latest progress of the renewed runs is stored right after (`fsm.worker.saving`);
- a renewal that finds a cancel request asks the handler to stop, and stops it
  hard once the cancel grace has passed;
- a renewal that finds the lease taken (the fence moved) loses that run: its
  handler is stopped and its result discarded;
- heartbeats failing for a lease TTL less one heartbeat interval, or the liveness
  token lost, lose every run at once: others may own those jobs soon. The executor is restarted
  (a new generation), so no late result of the old runs can reach anyone.
"""

from __future__ import annotations

import logging
import time

from .runs import Run
from .saving import save_progress
from .state import Shared

log = logging.getLogger(__name__)

DEFAULT_CANCEL_GRACE = 5.0  # seconds between a seen cancel request and a hard stop


class Leases:
    """Heartbeats, cancel requests and lost leases for one worker."""

    def __init__(self, shared: Shared, cancel_grace: float = DEFAULT_CANCEL_GRACE) -> None:
        self.s = shared
        self.cancel_grace = cancel_grace

    def loop(self) -> None:
        s = self.s
        interval = s.engine.policy.lease.heartbeat_interval
        ttl = s.engine.policy.lease.ttl
        last_ok = time.monotonic()
        while not s.quiet.wait(interval):
            try:
                self.heartbeat()
                last_ok = time.monotonic()
            except Exception as err:
                s.store_ok = False
                log.warning("worker %s: heartbeat failed: %s", s.owner_name, err)
                # Give up one interval before the lease can lapse at the store: by then
                # another worker may be about to take these jobs over.
                if time.monotonic() - last_ok >= max(interval, ttl - interval):
                    self.lose_all(f"heartbeats failed for {ttl - interval:g}s of a {ttl:g}s lease")

    def heartbeat(self) -> None:
        """Renew every held lease at once; act on cancel requests and lost leases."""
        s = self.s
        runs = self._newest_per_job(s.runs.live())
        now = time.monotonic()
        if runs:
            renewed = s.engine.heartbeat(s.identity.owner, {r.job.id: r.job.fence for r in runs})
            s.store_ok = True
            s.engine.observers.on_renewals(len(renewed), len(runs) - len(renewed))
            save_progress(s, (r for r in runs if r.job.id in renewed))
            for run in runs:
                state = renewed.get(run.job.id)
                if state is None:
                    if not s.runs.is_reporting(run):
                        self.lose(run, "heartbeat found the lease taken")
                elif state == "cancelling" and run.cancel_seen is None:
                    self._ask_to_stop(run, now)
        for run in s.runs.live():
            if (
                run.cancel_seen is not None
                and not run.hard
                and now - run.cancel_seen >= self.cancel_grace
            ):
                run.hard = True
                assert s.executor is not None
                log.warning(
                    "job %s: still running %.1fs after its cancel request; stopping it",
                    run.job.id,
                    now - run.cancel_seen,
                )
                s.executor.cancel(
                    run.job.id, fence=run.job.fence, hard=True, reason="cancel grace passed"
                )

    def _newest_per_job(self, runs: list[Run]) -> list[Run]:
        """One run per job: the newest fence. An older run of the same job lost its
        lease when the job was leased again, so it is lost here, never renewed."""
        newest: dict[str, Run] = {}
        for run in runs:
            held = newest.get(run.job.id)
            if held is None or run.job.fence > held.job.fence:
                newest[run.job.id] = run
        for run in runs:
            if newest[run.job.id] is not run:
                self.lose(run, "a newer lease of the job exists")
        return list(newest.values())

    def _ask_to_stop(self, run: Run, now: float) -> None:
        run.cancel_seen = now
        run.cancelled.set()
        assert self.s.executor is not None
        self.s.executor.cancel(run.job.id, fence=run.job.fence, reason="cancel requested")
        log.info("job %s: cancel request seen; handler asked to stop", run.job.id)

    def lose(self, run: Run, reason: str, *, stop: bool = True) -> None:
        """This run's lease is gone: stop its handler and discard its result."""
        s = self.s
        if not s.runs.lose(run):
            return
        run.lease_lost.set()
        run.cancelled.set()
        s.engine.observers.on_lease_lost(run.job.kind)
        log.warning(
            "job %s: lease lost (%s); stopping its handler, result discarded", run.job.id, reason
        )
        if stop and s.executor is not None:
            s.executor.cancel(
                run.job.id, fence=run.job.fence, hard=True, reason=f"lease lost: {reason}"
            )
        s.runs.finish(run)

    def lose_all(self, reason: str) -> None:
        """Every lease may be someone else's now: lose them all, restart the executor."""
        s = self.s
        runs = s.runs.all()
        for run in runs:
            self.lose(run, reason, stop=False)
        if runs and s.executor is not None:
            s.executor.restart(f"every lease lost: {reason}")

    def on_liveness_lost(self) -> None:
        """The liveness token is gone: every lease may be taken over now. Stop them all."""
        self.s.liveness_lost.set()
        self.s.store_ok = False
        self.lose_all("liveness connection lost")

    def regain_liveness(self) -> bool:
        """Take a liveness token again, as a new incarnation (the old one counts as dead)."""
        s = self.s
        if s.runs.count():
            return False
        try:
            if s.liveness is not None:
                s.liveness.release(s.identity.owner)
                owner = s.identity.renew_incarnation()
                s.liveness.hold(owner, self.on_liveness_lost)
                log.warning("worker: liveness token taken as incarnation %s", owner)
        except Exception as err:
            log.warning("worker %s: liveness not regained yet: %s", s.owner_name, err)
            return False
        s.liveness_lost.clear()
        return True
