"""Deadlines: jobs whose deadline passed are failed (the spec's `deadline` event)."""

from __future__ import annotations

from ...errors import IllegalTransition, VersionConflict
from ...ports import ScanRequest
from .. import plans
from ..kernel import KernelSource
from ..writes import run
from .report import Report


class Deadlines:
    """Fails, in one bounded pass, the jobs past their deadline."""

    name = "deadlines"

    def __init__(self, source: KernelSource) -> None:
        self.source = source

    def run_once(self, limit: int = 1000) -> Report:
        kernel = self.source.kernel
        now = kernel.clock.now()
        request = ScanRequest(
            states=kernel.spec.sources("deadline"), deadline_passed_at=now, limit=limit
        )
        report = Report()
        for job in kernel.store.scan(request):
            try:
                run(kernel, plans.transition(kernel, job.id, "deadline", {}))
            except (IllegalTransition, VersionConflict):
                report += Report(errors=1)
            else:
                report += Report(deadlines=1)
        return report
