"""The release sweep: the backstop of dependency releases (`fsm.service.dependencies`).

A process that dies between a prerequisite's last write and its dependents' release
leaves them waiting; each pass looks at the next slice of waiting jobs (in id order,
wrapping around) and releases those whose prerequisites allow it, and what that
release lets go in turn.
"""

from __future__ import annotations

import threading

from ...ports import TracksDependencies
from .. import dependencies
from ..kernel import KernelSource
from .report import Report


class ReleaseSweep:
    """Walks the waiting jobs a bounded slice per pass; keeps its cursor between passes."""

    name = "release"

    def __init__(self, source: KernelSource) -> None:
        self.source = source
        #: the last waiting job id looked at ("": start from the first)
        self.cursor = ""
        self._lock = threading.Lock()

    def run_once(self, limit: int = 1000) -> Report:
        kernel = self.source.kernel
        store = kernel.store
        if not isinstance(store, TracksDependencies):
            return Report()
        with self._lock:
            cursor = self.cursor
        jobs = store.in_states_after(dependencies.waiting_states(kernel.spec), cursor, limit)
        with self._lock:
            self.cursor = jobs[-1].id if len(jobs) >= limit else ""
        done, written = dependencies.release(kernel, jobs)
        finished = [j for j in written if j.state in kernel.final_states]
        if finished:
            done += dependencies.settled_report(kernel, finished)[0]
        return Report(released=done.met + done.failed, errors=done.conflicts)
