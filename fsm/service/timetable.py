"""When a schedule's ticks fall, and which of them a pass submits: pure (no store, no
clock). `fsm.service.schedules` defines schedules and re-exports these names.

The missed-tick policy (docs/schedules.md, "Missed ticks") is `due`: a tick is *missed*
only when the pass that finds it is late by LATE_GRACE or more for it AND no scheduler
had handled the schedule in the LATE_GRACE before that pass (`checked`, the time of the
last pass that did). Ticks that come due between healthy passes are never missed,
however short the interval and however the passes fall.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

import attrs
from cronsim import CronSim

#: the lateness bound: a tick less than this many seconds late is on time and runs
#: under every policy; a pass that comes more than this long after the last one that
#: handled a schedule finds the ticks older than this missed (the policy decides)
LATE_GRACE = 60.0
#: longest interval, and how far ahead `next_tick` looks
MAX_EVERY = 366 * 86400.0
#: extra steps a cron walk may take past ticks that are not after its start (DST folds)
_FOLD_STEPS = 4
#: a pass counts the missed ticks of a cron schedule it skips up to this many
SKIP_COUNT_LIMIT = 10_000


class Repeats(Protocol):
    """How a schedule repeats and treats missed ticks (`fsm.service.schedules.Schedule`)."""

    @property
    def cron(self) -> str | None: ...

    @property
    def every(self) -> float | None: ...

    @property
    def zone(self) -> ZoneInfo: ...

    @property
    def missed(self) -> str: ...

    @property
    def catch_up(self) -> int: ...


def tick_key(name: str, tick: float) -> str:
    """The idempotency key of one tick's job: one job per schedule and tick, ever."""
    return f"schedule:{name}:{iso(tick)}"


def iso(tick: float) -> str:
    return datetime.fromtimestamp(tick, UTC).isoformat()


def _multiple(k: int, every: float) -> float:
    """Tick k of an interval, rounded to the microsecond: the same value in every process
    (and in the tick's key), without float noise such as 1000.0500000000001."""
    return round(k * every, 6)


def ticks_after(s: Repeats, after: float, until: float, limit: int) -> list[float]:
    """The ticks t with after < t <= until, oldest first, at most `limit`."""
    out: list[float] = []
    if limit < 1 or until <= after:
        return out
    if s.every is not None:
        k = math.floor(after / s.every)
        while len(out) < limit:
            t = _multiple(k, s.every)
            k += 1
            if t <= after:
                continue
            if t > until:
                break
            out.append(t)
        return out
    assert s.cron is not None
    walk = CronSim(s.cron, datetime.fromtimestamp(after, s.zone))
    stray = 0
    while len(out) < limit:
        found = next(walk, None)  # None: the expression has no further tick
        if found is None:
            break
        t = found.timestamp()
        if t <= after or (out and t <= out[-1]):
            stray += 1  # a DST fold walked back: bounded
            if stray > _FOLD_STEPS:
                break
            continue
        if t > until:
            break
        out.append(t)
    return out


def next_tick(s: Repeats, after: float) -> float | None:
    """The first tick after `after` (None if there is none within a year and a day)."""
    found = ticks_after(s, after, after + MAX_EVERY + 86400.0, 1)
    return found[0] if found else None


def newest_ticks(s: Repeats, after: float, until: float, n: int) -> list[float]:
    """The newest `n` ticks t with after < t <= until, oldest first."""
    if n < 1 or until <= after:
        return []
    if s.every is not None:
        top = math.floor(until / s.every) + 1  # one past: float division may fall short
        ticks = [_multiple(k, s.every) for k in range(top - n, top + 1)]
        return [t for t in ticks if after < t <= until][-n:]
    assert s.cron is not None
    start, extra = _reverse_start(until, s.zone)
    walk = CronSim(s.cron, start, reverse=True)
    found: set[float] = set()
    for _ in range(n + _FOLD_STEPS + extra):
        back = next(walk, None)
        if back is None:
            break
        t = back.timestamp()
        if t <= after:
            break
        if t <= until:
            found.add(t)
        if len(found) >= n:
            break
    return sorted(found)[-n:]


def _reverse_start(until: float, zone: ZoneInfo) -> tuple[datetime, int]:
    """Where a backward cron walk for the ticks at or before `until` starts, and how many
    steps past ticks after `until` it may need.

    A walk compares wall-clock times. When `until` falls in the second pass of an hour
    the clocks turned back (fold 1), the ticks of that hour's first pass came earlier
    but read later on the wall (02:30 CEST comes before 02:18 CET): the walk starts at
    the wall time one shift later (03:18), and may step past the ticks of the shift it
    added, at most one a second (a six-field expression), before it reaches them."""
    here = datetime.fromtimestamp(until, zone)
    if not here.fold:
        return here + timedelta(microseconds=1), 0
    shift = (here.replace(fold=0).utcoffset() or timedelta(0)) - (here.utcoffset() or timedelta(0))
    later = datetime.fromtimestamp(until + shift.total_seconds(), zone)
    return later + timedelta(microseconds=1), math.ceil(shift.total_seconds()) + 1


def count_ticks(s: Repeats, after: float, until: float) -> int:
    """How many ticks t with after < t <= until: exact for intervals, at most
    SKIP_COUNT_LIMIT for cron expressions."""
    if until <= after:
        return 0
    if s.every is not None:
        first = ticks_after(s, after, until, 1)
        last = newest_ticks(s, after, until, 1)
        if not first or not last:
            return 0
        return round((last[0] - first[0]) / s.every) + 1
    return len(ticks_after(s, after, until, SKIP_COUNT_LIMIT))


@attrs.frozen
class Due:
    """What one pass does for one schedule: `ticks` to submit now (oldest first);
    `skipped` missed ticks left out by the policy, from `first_skipped` to
    `last_skipped`; `more`: due ticks remain past `ticks` (the pass hit its limit)."""

    ticks: list[float]
    skipped: int = 0
    first_skipped: float | None = None
    last_skipped: float | None = None
    more: bool = False

    @property
    def handled(self) -> float | None:
        """The newest tick this pass handles (submits or skips): the schedule's next
        `last_tick`, or None if it handles none."""
        return self.ticks[-1] if self.ticks else self.last_skipped


def due(s: Repeats, last: float, checked: float, now: float, limit: int) -> Due:
    """The ticks after `last` (the newest tick handled) that a pass at `now` submits,
    given `checked`, the time of the last pass that handled the schedule (its creation
    if none did).

    - `now - checked <= LATE_GRACE` (a scheduler ran): every due tick runs.
    - otherwise (no scheduler ran: all down, or the schedule paused) the due ticks
      `t <= now - LATE_GRACE` are missed: `skip` runs none of them, `catch_up` the
      newest `s.catch_up`; the younger ones run under both.

    At most `limit` ticks, oldest first; the rest are `more` (the next pass goes on
    from the last one submitted, and nothing it skipped comes back)."""
    if now - checked <= LATE_GRACE:
        ticks = ticks_after(s, last, now, limit + 1)
        return Due(ticks[:limit], more=len(ticks) > limit)
    bound = now - LATE_GRACE  # ticks at or before it are missed
    keep = s.catch_up if s.missed == "catch_up" else 0
    caught = newest_ticks(s, last, bound, keep) if keep else []
    skip_until = caught[0] - 1e-6 if caught else bound  # ticks are whole microseconds
    selected = caught + ticks_after(s, max(last, bound), now, limit + 1)
    skipped = count_ticks(s, last, skip_until)
    newest = newest_ticks(s, last, skip_until, 1) if skipped else []
    first = ticks_after(s, last, skip_until, 1) if skipped else []
    return Due(
        selected[:limit],
        skipped=skipped,
        first_skipped=first[0] if first else None,
        last_skipped=newest[0] if newest else None,
        more=len(selected) > limit,
    )
