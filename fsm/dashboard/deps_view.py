"""A job page's dependencies (issue 35 item 4): its prerequisites (`after=`) and the
jobs that wait for it, each with its state, and for a waiting job what it waits for.

Read through the store's `TracksDependencies` (the same reads as `jobfsm inspect`):
the prerequisites of one job and at most SHOWN_DEPENDENTS dependents, through the
index on the prerequisite's id. Which prerequisite state counts as succeeded or
failed is the lifecycle's (`fsm.lifecycle.prerequisites`), not this module's.
"""

from __future__ import annotations

import attrs

from ..lifecycle.prerequisites import PREREQUISITE_FAILED, PREREQUISITE_SUCCEEDED
from ..records import Job
from ..service import dependencies
from ..service.engine import Engine

#: prerequisites listed on a page (their kinds read one by one)
SHOWN_PREREQUISITES = 50


@attrs.frozen
class Prerequisite:
    id: str
    #: its state now, or "gone" when it is no longer stored
    state: str
    kind: str | None
    #: "succeeded", "failed" (releases the dependent by its on_failed_dependency rule)
    #: or "pending"
    verdict: str


@attrs.frozen
class DependenciesView:
    prerequisites: tuple[Prerequisite, ...]
    prerequisites_total: int
    dependents: tuple[Job, ...]
    #: SHOWN_DEPENDENTS were listed and more may exist
    dependents_more: bool
    #: the job is in the spec's waiting state
    waiting: bool
    #: the prerequisites a waiting job still waits for (pending ones)
    waits_for: tuple[Prerequisite, ...]
    #: the prerequisites that failed (the job is released by its rule)
    failed: tuple[Prerequisite, ...]
    on_failed: str | None

    @property
    def any(self) -> bool:
        return bool(self.prerequisites or self.dependents)


def _verdict(state: str) -> str:
    if state == PREREQUISITE_SUCCEEDED:
        return "succeeded"
    return "failed" if state in PREREQUISITE_FAILED else "pending"


def dependencies_view(engine: Engine, job: Job) -> DependenciesView:
    """The job's prerequisites and dependents with their states (bounded reads)."""
    kernel = engine.kernel
    found = dependencies.prerequisite_states(dependencies.prerequisites_of(kernel, job.id))
    prereqs = []
    for pid, state in sorted(found.items())[:SHOWN_PREREQUISITES]:
        other = None if state == "gone" else engine.store.get(pid)
        prereqs.append(Prerequisite(pid, state, other.kind if other else None, _verdict(state)))
    shown = dependencies.SHOWN_DEPENDENTS
    dependents = dependencies.dependents_of(kernel, job.id, shown)
    waiting = job.state in dependencies.waiting_states(engine.spec)
    return DependenciesView(
        prerequisites=tuple(prereqs),
        prerequisites_total=len(found),
        dependents=tuple(dependents),
        dependents_more=len(dependents) >= shown,
        waiting=waiting,
        waits_for=tuple(p for p in prereqs if p.verdict == "pending") if waiting else (),
        failed=tuple(p for p in prereqs if p.verdict == "failed"),
        on_failed=job.on_failed_dependency,
    )
