"""What a maintenance pass did: one report type for every service, summed by a sweep."""

from __future__ import annotations

import attrs


@attrs.frozen
class Deferred:
    """A job a pass saw and left for later on purpose: which, why, and until when."""

    job_id: str
    kind: str
    #: why the pass left it, in words an operator reads
    why: str
    #: when a pass may take it (a Unix time); None: the next pass
    until: float | None = None


@attrs.frozen
class Report:
    """Counts of one pass. `errors` counts jobs that moved before the pass's write (and
    schedules whose pass failed)."""

    #: jobs taken back from owners that lost them
    expired: int = 0
    #: jobs failed because their deadline passed
    deadlines: int = 0
    #: of the jobs taken back, those parked in investigate
    to_investigate: int = 0
    errors: int = 0
    #: waiting jobs let go (or ended by their on_failed_dependency rule)
    released: int = 0
    #: reconciler calls whose answers were recorded (or started, in the background)
    reconciled: int = 0
    #: schedule ticks submitted (a tick another scheduler submitted first counts too)
    submitted: int = 0
    #: compare-and-set races lost to another scheduler moving a schedule's last tick
    lost_races: int = 0
    #: finished jobs deleted past their retention
    pruned: int = 0
    #: schedule ticks missed while no scheduler ran, left out by the schedule's policy
    skipped: int = 0
    #: schedules left with due ticks past the pass's limit (the next pass goes on at once)
    behind: int = 0
    #: jobs the pass left for later on purpose (`Deferred`), in the order it met them
    deferred: tuple[Deferred, ...] = ()

    def __add__(self, other: Report) -> Report:
        mine, theirs = attrs.astuple(self, recurse=False), attrs.astuple(other, recurse=False)
        return Report(*(a + b for a, b in zip(mine, theirs, strict=True)))
