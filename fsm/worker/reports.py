"""The reporter thread: finished attempts become engine reports, written in batches.

Each outcome maps to one fenced event (`event_for`). A batch is written with one
`Engine.report_many`; a report the store refuses fails alone (the engine decides
each one again on its own), and a store that stays away past the bound leaves the
runs to recovery instead of guessing their fate.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Mapping
from typing import Any

from ..errors import IllegalTransition, JobFSMError, LeaseLost
from ..ports import Outcome
from ..records import Job
from .runs import Run
from .saving import save_progress
from .state import Shared

log = logging.getLogger(__name__)

#: how an attempt that was asked to stop by a cancel request may end without returning:
#: each is acknowledged (`cancelled_ack`), its latest progress kept as the partial result
_STOPPED = ("cancelled", "killed", "failed", "timeout", "crashed")

DEFAULT_REPORT_BATCH = 256  # most reports written in one store transaction
BATCH_WINDOW = 0.02  # longest wait to gather reports into one batch


class Reporter:
    """Turns outcomes into reports; runs on its own thread until the worker is done."""

    def __init__(self, shared: Shared, batch: int = DEFAULT_REPORT_BATCH) -> None:
        self.s = shared
        self.batch = max(1, batch)

    def loop(self) -> None:
        s = self.s
        while True:
            try:
                first = s.outcomes.get(timeout=0.2)
            except queue.Empty:
                if s.finished.is_set() or (s.quiet.is_set() and not s.runs.count()):
                    return
                continue
            batch = [first]
            until = time.monotonic() + BATCH_WINDOW
            while len(batch) < self.batch:
                try:
                    batch.append(s.outcomes.get_nowait())
                    continue
                except queue.Empty:
                    pass
                left = until - time.monotonic()
                if left <= 0 or len(batch) >= s.runs.in_flight():
                    break  # nothing more is running: report now
                try:
                    batch.append(s.outcomes.get(timeout=left))
                except queue.Empty:
                    break
            try:
                self.report(batch)
            except Exception:
                log.exception("worker %s: reporting failed", s.owner_name)
                for run, _ in batch:  # never leave a run registered after its outcome
                    s.runs.finish(run, abandoned="its outcome could not be reported")

    def _partial(self, run: Run) -> str:
        """The partial result kept when a handler stopped on a cancel request without
        returning: the latest progress it reported (checked against the payload limit
        when it was reported, on whichever executor), or null."""
        _, text, _ = run.ctx.latest_progress()
        limit = self.s.engine.policy.limits.max_payload_bytes
        return "null" if text is None or len(text) > limit else text

    def event_for(self, run: Run, outcome: Outcome) -> tuple[str, dict[str, Any]] | None:
        """The engine report for an outcome, or None when there is nothing to report."""
        fence = run.job.fence
        status = outcome.status
        if status == "succeeded":
            result = outcome.result_json or "null"
            limit = self.s.engine.policy.limits.max_payload_bytes
            if len(result.encode("utf-8")) > limit:  # one limit, whichever executor ran it
                error = f"result of job {run.job.id} is over the limit of {limit} bytes"
                return "fail", {"fence": fence, "error": error, "permanent": True}
            # after a cancel request the spec ends it cancelled, this value kept as partial
            return "succeed", {"fence": fence, "result_json": result}
        if run.cancel_seen is not None and status in _STOPPED:
            return "cancelled_ack", {"fence": fence, "result_json": self._partial(run)}
        if status == "retry":
            return "fail", {"fence": fence, "error": outcome.error, "delay": outcome.delay}
        if status == "permanent":
            return "fail", {"fence": fence, "error": outcome.error, "permanent": True}
        if status == "ambiguous":
            return "ambiguous", {"fence": fence, "error": outcome.error}
        if status == "abandoned":
            return None
        error = outcome.error or status
        if status == "cancelled":
            error = f"handler stopped without a cancel request: {error}"
        args: dict[str, Any] = {"fence": fence, "error": error}
        if outcome.traceback:
            args["traceback"] = outcome.traceback  # kept in the audit entry, not the record
        return "fail", args

    def report(self, batch: list[tuple[Run, Outcome]]) -> None:
        s = self.s
        observers = s.engine.observers
        reports: list[tuple[Job, str, Mapping[str, Any]]] = []
        runs: list[Run] = []
        for run, outcome in batch:
            observers.on_attempt(run.job, outcome.status, outcome.error, outcome.seconds)
        kept = s.runs.start_reporting_many([run for run, _ in batch])
        for (run, outcome), keep in zip(batch, kept, strict=True):
            if not keep:
                log.info(
                    "job %s: %s result discarded (%s)",
                    run.job.id,
                    outcome.status,
                    run.dropped or "lease lost",
                )
                s.runs.finish(run)
                continue
            event = self.event_for(run, outcome)
            if event is None:
                reason = f"attempt abandoned: {outcome.error or 'could not be stopped'}"
                log.warning("job %s: %s; left to recovery", run.job.id, reason)
                s.runs.finish(run, abandoned=reason)
                continue
            reports.append((run.job, event[0], event[1]))
            runs.append(run)
        if not reports:
            return

        def write() -> list[Job | JobFSMError]:
            # the last values first (it is what each job keeps), tried again with the report
            save_progress(s, runs, retried=True)
            return s.engine.report_many(reports)

        results = s.with_retries("report", write)
        if results is None:  # the store stayed away: the leases lapse, recovery decides
            s.runs.finish_many(runs, abandoned="the result could not be reported")
            return
        cancelled: list[Run] = []
        done: list[Run] = []
        for run, result in zip(runs, results, strict=True):
            if isinstance(result, Job):
                done.append(run)
                continue
            if self._cancelled_meanwhile(result):
                cancelled.append(run)
                continue
            if isinstance(result, LeaseLost):
                log.info("job %s: report discarded: %s", run.job.id, result)
                observers.on_lease_lost(run.job.kind)
            else:
                log.warning("job %s: report failed: %s", run.job.id, result)
            done.append(run)
        s.runs.finish_many(done)
        if cancelled:
            self._acknowledge(cancelled)

    def _cancelled_meanwhile(self, result: Job | JobFSMError) -> bool:
        """The report was refused because a cancel was requested before the worker saw
        it (the handler failed or was stopped meanwhile): the spec takes `cancelled_ack`
        in that state, so the run is acknowledged as stopped instead."""
        return (
            isinstance(result, IllegalTransition)
            and result.event != "cancelled_ack"
            and result.state in self.s.engine.spec.sources("cancelled_ack")
        )

    def _acknowledge(self, runs: list[Run]) -> None:
        """Report `cancelled_ack` for `runs`, each keeping its latest progress."""
        s = self.s
        acks: list[tuple[Job, str, Mapping[str, Any]]] = [
            (r.job, "cancelled_ack", {"fence": r.job.fence, "result_json": self._partial(r)})
            for r in runs
        ]
        results = s.with_retries("report", lambda: s.engine.report_many(acks))
        for i, run in enumerate(runs):
            result = None if results is None else results[i]
            if not isinstance(result, Job):
                log.warning("job %s: cancel acknowledgement failed: %s", run.job.id, result)
            s.runs.finish(run)
