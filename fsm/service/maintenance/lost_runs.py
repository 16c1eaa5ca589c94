"""Lost runs of kinds with a reconciler: ask the outside system what they did.

The rescuer claims such a run by its `expire` (state `reconciling`, fence + 1, this
process its owner) and hands it over with `claimed`; a pass then asks each claimed
run's reconciler and records the answer as the fenced `reconcile` event
(`fsm.service.reconcile` says what the answers mean), and claims again (`recheck`)
and asks the reconciling jobs whose next check is due. A claim is held in this
process's registry (`Identity.hold`) from the claim until its answer is recorded, so
this process's own sweeps never judge it dead.

Bounds: at most RECONCILES_PER_SWEEP reconciler calls per pass, counting the
rescuer's claims (`can_call`); no new claim while MAX_HUNG reconciler threads of this
process run past their timeout, or while the `asker` has no free slot. With an
`Asker` the calls run in the background and a pass never waits on a reconciler;
without one (the CLI, tests, the fault suite) the pass waits for each answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ...errors import JobFSMError, LeaseLost
from ...ports import ScanRequest
from ...records import Job
from ...text import clean_text
from .. import plans
from ..identity import Identity
from ..kernel import KernelSource
from ..reconcile import (
    CLAIM_MARGIN,
    MAX_HUNG,
    RECONCILES_PER_SWEEP,
    Asker,
    Reconciler,
    ask,
    hung,
    lost_run,
)
from ..writes import decide_seen, run
from .report import Report

log = logging.getLogger(__name__)


class LostRuns:
    """The reconcilers this process may call, with the per-pass bound on calls."""

    name = "lost_runs"

    def __init__(
        self,
        source: KernelSource,
        reconcilers: Mapping[str, Reconciler],
        identity: Identity,
        asker: Asker | None = None,
    ) -> None:
        self.source = source
        self.reconcilers = reconcilers
        self.identity = identity
        self.owner = identity.owner
        self.asker = asker
        self._lock = threading.Lock()
        #: runs the rescuer claimed in this pass, not asked yet
        self._claimed: list[Job] = []
        #: reconciler calls left in this pass
        self._calls_left = RECONCILES_PER_SWEEP

    def can_call(self) -> bool:
        """Whether this pass may claim (and so call) one more reconcile."""
        busy = self.asker is not None and self.asker.free() <= len(self._claimed)
        with self._lock:
            left = self._calls_left - len(self._claimed)
        return left > 0 and hung() < MAX_HUNG and not busy

    def claim_args(self, job: Job) -> dict[str, Any] | None:
        """`expire`'s arguments that claim the reconcile of `job`, None if its kind has
        no reconciler here."""
        spec = self.reconcilers.get(job.kind)
        if spec is None:
            return None
        now = self.source.kernel.clock.now()
        return {
            "reconciler": True,
            "final_check": spec.final_check,
            "owner": self.owner,
            "lease_until": now + spec.timeout + CLAIM_MARGIN,
        }

    def claimed(self, job: Job) -> None:
        """The rescuer claimed `job` for its reconciler: held until it is answered."""
        self.identity.hold(job.id, job.fence)
        with self._lock:
            self._claimed.append(job)

    def run_once(self, limit: int = 1000) -> Report:
        """Ask the runs claimed since the last pass, then the rechecks that are due."""
        with self._lock:
            claimed, self._claimed = self._claimed, []
        asked = 0
        for job in claimed:
            asked += self._ask(job)
        asked += self._rechecks(limit)
        with self._lock:
            self._calls_left = RECONCILES_PER_SWEEP
        return Report(reconciled=asked)

    def _rechecks(self, limit: int) -> int:
        """Claim and ask the reconciling jobs whose next check is due (bounded)."""
        kernel = self.source.kernel
        now = kernel.clock.now()
        asked = 0
        for job in kernel.store.scan(ScanRequest(states=("reconciling",), limit=limit)):
            if not self.can_call():
                break
            if job.owner is not None or job.run_after > now:
                continue
            args = self.claim_args(job)
            if args is None:
                continue
            claimed = decide_seen(
                kernel, job, "recheck", owner=args["owner"], lease_until=args["lease_until"]
            )
            if claimed is not None:
                self.identity.hold(claimed.id, claimed.fence)
                asked += self._ask(claimed)
        return asked

    def _ask(self, job: Job) -> int:
        """Ask about a claimed job and record the answer (in the background with an
        asker). Returns 1 if a call was made."""
        spec = self.reconcilers.get(job.kind)
        if spec is None or job.owner != self.owner or job.state != "reconciling":
            self.identity.drop(job.id, job.fence)
            return 0
        with self._lock:
            self._calls_left -= 1
        if self.asker is not None:
            self.asker.start(job.id, lambda: self._settle(spec, job))
        else:
            self._settle(spec, job)
        return 1

    def _settle(self, spec: Reconciler, job: Job) -> Job | None:
        try:
            return self._answer(spec, job)
        finally:
            self.identity.drop(job.id, job.fence)

    def _answer(self, spec: Reconciler, job: Job) -> Job | None:
        kernel = self.source.kernel
        answer, failure = ask(spec, lost_run(kernel, job))
        if failure is not None:
            log.warning("job %s: reconciler of %r failed: %s", job.id, job.kind, failure)
        try:
            try:
                plan = plans.reconcile(
                    kernel,
                    job.id,
                    job.fence,
                    answer.answer,
                    result=answer.result,
                    until=answer.until,
                    failure=failure,
                    why=answer.why,
                )
                return run(kernel, plan)
            except LeaseLost:
                raise
            except JobFSMError as err:  # e.g. a result that is not JSON: unknown
                failure = clean_text(f"bad answer: {err}")[:500]
                plan = plans.reconcile(kernel, job.id, job.fence, "unknown", failure=failure)
                return run(kernel, plan)
        except JobFSMError as err:
            # the claim lapses and the next pass investigates it (reconciler_lost)
            log.warning("job %s: reconcile answer not recorded: %s", job.id, err)
            return None
