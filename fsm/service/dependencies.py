"""Releasing jobs that wait for prerequisites (`after=`, docs/dependencies.md).

A job submitted with prerequisites starts in the spec's waiting state. Whenever a
write leaves a job final (terminal or parked) its dependents are looked up through
the store's index on the prerequisite id, and each is offered the spec's release
events with the prerequisites' states as read: `decide` picks what the guards
allow (all succeeded: `dependencies_met`; one failed: `dependency_failed`, whose
transition follows the job's `on_failed_dependency` rule) or refuses (still
waiting). Every release is a decision written with compare-and-set, audited like
any transition. Nothing here names a rule: the guards in fsm/lifecycle/rules.py do.

Who releases: the engine right after its own writes (a worker's reports, operator
actions, the recovery sweep's expiries and deadlines, a submit whose prerequisites
are already finished), and `sweep`, run by the recovery sweep, as the backstop for a
process that died between a prerequisite's write and its dependents' release. Both
are bounded: RELEASE_LIMIT jobs per call, SWEEP_LIMIT waiting jobs per sweep pass
(the sweep is `fsm.service.maintenance.release`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ..errors import IllegalTransition
from ..lifecycle.prerequisites import PREREQUISITE_GONE
from ..lifecycle.spec import Lifecycle
from ..ports import TracksDependencies
from ..records import Decision, Job
from .kernel import Kernel

log = logging.getLogger(__name__)

#: the spec's events that let a waiting job go, tried in this order
RELEASE_EVENTS = ("dependencies_met", "dependency_failed")
#: most jobs one release after a write looks at (the rest is left to the sweep)
RELEASE_LIMIT = 1000
#: most rounds one release follows a chain (a dependent cancelled by its rule
#: releases its own dependents in the next round)
RELEASE_ROUNDS = 32
#: most waiting jobs one recovery sweep pass looks at
SWEEP_LIMIT = 1000


@attrs.frozen
class ReleaseReport:
    """What one release did: jobs examined, released (by event), lost races."""

    examined: int = 0
    met: int = 0
    failed: int = 0
    conflicts: int = 0

    def __add__(self, other: ReleaseReport) -> ReleaseReport:
        return ReleaseReport(
            self.examined + other.examined,
            self.met + other.met,
            self.failed + other.failed,
            self.conflicts + other.conflicts,
        )


def waiting_states(spec: Lifecycle) -> tuple[str, ...]:
    """The states the release events apply to (the spec's waiting state)."""
    return tuple(sorted({s for ev in RELEASE_EVENTS for s in spec.sources(ev)}))


def prerequisite_states(found: Mapping[str, str | None]) -> dict[str, str]:
    """The stored states as the release events take them: a prerequisite no longer
    stored is "gone" (its success cannot be shown)."""
    return {k: PREREQUISITE_GONE if v is None else v for k, v in found.items()}


def _tracking(kernel: Kernel) -> TracksDependencies:
    store = kernel.store
    assert isinstance(store, TracksDependencies), "the kernel's store keeps no dependencies"
    return store


# --- after a write ----------------------------------------------------------------


def settled(kernel: Kernel, jobs: Iterable[Job]) -> list[Job]:
    """Release what the written `jobs` let go: their waiting dependents if they are
    final, themselves if they wait; return the jobs it wrote. Never raises: the
    recovery sweep repairs what it missed."""
    return settled_report(kernel, jobs)[1]


def settled_report(kernel: Kernel, jobs: Iterable[Job]) -> tuple[ReleaseReport, list[Job]]:
    """`settled`, with what it did."""
    if not kernel.releases:
        return ReleaseReport(), []
    waits = waiting_states(kernel.spec)
    finished: list[str] = []
    waiting: list[Job] = []
    for job in jobs:
        if job.state in kernel.final_states:
            finished.append(job.id)
        elif job.state in waits:
            waiting.append(job)
    if not finished and not waiting:
        return ReleaseReport(), []
    try:
        return _cascade(kernel, finished, waiting)
    except Exception:  # the writes that came before stand; the sweep finishes this
        log.warning("releasing dependents failed; the recovery sweep will", exc_info=True)
        return ReleaseReport(), []


def _cascade(
    kernel: Kernel, finished: list[str], waiting: list[Job]
) -> tuple[ReleaseReport, list[Job]]:
    store = _tracking(kernel)
    waits = waiting_states(kernel.spec)
    report = ReleaseReport()
    out: list[Job] = []
    for _ in range(RELEASE_ROUNDS):
        room = RELEASE_LIMIT - report.examined
        if room <= 0 or not (finished or waiting):
            break
        if finished:
            waiting = [*waiting, *store.dependents(finished, waits, room)]
        done, written = release(kernel, waiting[:room])
        report += done
        out += written
        finished = [j.id for j in written if j.state in kernel.final_states]
        waiting = []
    if finished or waiting:
        log.info("release stopped at %d jobs; the recovery sweep goes on", report.examined)
    return report, out


# --- the release itself -----------------------------------------------------------


def release(kernel: Kernel, jobs: Sequence[Job]) -> tuple[ReleaseReport, list[Job]]:
    """Offer each waiting job the release events with its prerequisites' states,
    decided on the record as read and written in one compare-and-set batch; a job
    that moved since is decided again on a fresh read. Returns what was written."""
    if not jobs:
        return ReleaseReport(), []
    waits = waiting_states(kernel.spec)
    found = _tracking(kernel).prerequisites([j.id for j in jobs])
    now = kernel.clock.now()
    decisions: list[Decision] = []
    for job in jobs:
        states = found.get(job.id)
        if not states or job.state not in waits:
            continue
        decision = _first(kernel, job, now, prerequisite_states(states))
        if decision is not None:
            decisions.append(decision)
    written: list[Job] = []
    conflicts = 0
    if decisions:
        for d, out in zip(decisions, kernel.apply(decisions), strict=True):
            if isinstance(out, Job):
                written.append(out)
                continue
            again = _again(kernel, d.job.id, prerequisite_states(found[d.job.id]))
            if again is None:
                conflicts += 1
            else:
                written.append(again)
    report = ReleaseReport(
        examined=len(jobs),
        met=sum(1 for d in decisions if d.event == RELEASE_EVENTS[0]),
        failed=sum(1 for d in decisions if d.event == RELEASE_EVENTS[1]),
        conflicts=conflicts,
    )
    _publish(kernel, [j for j in written if j.state in kernel.lease_states])
    return report, written


def _again(kernel: Kernel, job_id: str, states: dict[str, str]) -> Job | None:
    """A release that lost its compare-and-set: re-read and offer the release events
    again, at most `limits.cas_retries` times; None if it never won or no longer waits."""
    waits = waiting_states(kernel.spec)
    for _ in range(kernel.policy.limits.cas_retries):
        job = kernel.store.get(job_id)
        if job is None or job.state not in waits:
            return None
        decision = _first(kernel, job, kernel.clock.now(), states)
        if decision is None:
            return None
        (written,) = kernel.apply([decision])
        if isinstance(written, Job):
            return written
    return None


def _publish(kernel: Kernel, queued: list[Job]) -> None:
    publisher = kernel.publisher
    if not queued or publisher is None:
        return
    try:
        publisher.publish(queued)
    except Exception:  # the store is the truth; a sweep republishes lost wake-ups
        log.warning("publishing %d released jobs failed", len(queued), exc_info=True)


def _first(kernel: Kernel, job: Job, now: float, states: dict[str, str]) -> Decision | None:
    """The first release event the spec allows for `job` now, decided; None if none."""
    for event in RELEASE_EVENTS:
        try:
            return kernel.decide(job, event, now, prerequisites=states)
        except IllegalTransition:
            continue
    return None


# --- reads for people (inspect, the dashboard) --------------------------------------

#: most dependents `dependents_of` lists (inspect shows a job's first ones)
SHOWN_DEPENDENTS = 50


def prerequisites_of(kernel: Kernel, job_id: str) -> dict[str, str | None]:
    """The job's prerequisites and their states now (None: pruned); {} without any."""
    store = kernel.store
    if not isinstance(store, TracksDependencies):
        return {}
    return store.prerequisites([job_id]).get(job_id, {})


def dependents_of(kernel: Kernel, job_id: str, limit: int = SHOWN_DEPENDENTS) -> list[Job]:
    """Up to `limit` jobs that name `job_id` as a prerequisite, in any state."""
    store = kernel.store
    if not isinstance(store, TracksDependencies):
        return []
    return store.dependents([job_id], kernel.spec.states, limit)
