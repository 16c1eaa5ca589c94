"""Schedules: what a periodic job is (a cron expression or a fixed interval) and its
ticks. Pure: no store, no clock; `fsm.scheduling` carries the ticks out.

Cron expressions are parsed and walked by cronsim (the library healthchecks.io runs its
cron checks on): 5 fields (minute precision) or 6 (a leading seconds field), `L`, `LW`,
`#`, month and day names. A cron schedule's ticks are local times in its IANA timezone
(zoneinfo), with DST handled as Debian's cron does (docs/schedules.md):

- spring forward (the clock jumps 02:00 -> 03:00): a job at 02:30 runs once, at 03:00,
  the first instant after the gap; a job every 30 minutes runs at 01:30, 03:00, 03:30.
- fall back (the clock goes 03:00 -> 02:00): a job at 02:30 runs once, in the first
  02:30 (summer time); a job whose hour field is `*` runs in both 02:xx hours.

Fixed intervals (`every`) are UTC ticks at whole multiples of the interval since the
epoch, so every worker computes the same ticks whenever it starts; no timezone applies.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from . import jsonio
from .errors import BadInput
from .inputs import check_name

#: what a scheduler does with ticks it finds already past (after downtime)
MISSED = ("skip", "catch_up")
#: `skip`: a tick at most this many seconds late is on time and runs; older ones are skipped
LATE_GRACE = 60.0
#: `catch_up`: the newest N missed ticks run (default, and the most allowed)
DEFAULT_CATCH_UP = 10
MAX_CATCH_UP = 1000
#: fixed intervals: shortest and longest
MIN_EVERY = 0.001
MAX_EVERY = 366 * 86400.0
#: schedule names: they are part of each tick's idempotency key
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
#: extra steps a cron walk may take past ticks that are not after its start (DST folds)
_FOLD_STEPS = 4


@attrs.frozen
class Schedule:
    """A validated schedule: build it with `schedule(...)`."""

    name: str
    kind: str
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    payload_json: str = "null"
    queue: str | None = None
    priority: int | None = None
    missed: str = "skip"
    catch_up: int = DEFAULT_CATCH_UP

    @property
    def spec(self) -> str:
        """How it repeats, as `jobfsm schedules list` shows it."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {self.every:g} s"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        """A stored definition, validated again (BadInput if it is not one)."""
        try:
            data = json.loads(text)
        except ValueError as err:
            raise BadInput(f"stored schedule is not JSON: {err}") from err
        if not isinstance(data, dict):
            raise BadInput("stored schedule is not a JSON object")
        fields = {f.name for f in attrs.fields(cls)}
        payload_json = data.pop("payload_json", "null")
        unknown = set(data) - fields
        if unknown:
            raise BadInput(f"stored schedule has unknown fields {sorted(unknown)}")
        if not isinstance(payload_json, str):
            raise BadInput("stored schedule: payload_json is not text")
        return schedule(payload=jsonio.decode(payload_json), **data)


def schedule(
    name: str,
    kind: str,
    *,
    cron: str | None = None,
    every: float | None = None,
    timezone: str = "UTC",
    payload: Any = None,
    queue: str | None = None,
    priority: int | None = None,
    missed: str = "skip",
    catch_up: int = DEFAULT_CATCH_UP,
) -> Schedule:
    """A Schedule, or BadInput naming what is wrong (nothing else happens)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadInput(
            f"a schedule name must be 1-100 characters of letters, digits, '_', '.' or '-'; "
            f"got {name!r:.80}"
        )
    where = f"schedule {name!r}"
    check_name(f"{where}: kind", kind)
    if queue is not None:
        check_name(f"{where}: queue", queue)
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise BadInput(f"{where}: priority must be an integer, got {priority!r}")
    if (cron is None) == (every is None):
        raise BadInput(f"{where}: give exactly one of a cron expression or an interval (every)")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as err:
        raise BadInput(f"{where}: unknown timezone {timezone!r:.80} (an IANA name)") from err
    if cron is not None:
        if not isinstance(cron, str) or not cron.isprintable() or len(cron) > 200:
            raise BadInput(f"{where}: a cron expression is printable text, got {cron!r:.80}")
        cron = " ".join(cron.split())
        try:
            next(CronSim(cron, datetime(2000, 1, 1, tzinfo=zone)))
        except (CronSimError, StopIteration, ValueError) as err:
            raise BadInput(f"{where}: bad cron expression {cron!r}: {err or 'no tick'}") from err
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float):
            raise BadInput(f"{where}: every must be a number of seconds, got {every!r}")
        every = float(every)
        if not (math.isfinite(every) and MIN_EVERY <= every <= MAX_EVERY):
            raise BadInput(f"{where}: every must be {MIN_EVERY}..{MAX_EVERY:g} seconds")
    if missed not in MISSED:
        raise BadInput(f"{where}: missed must be one of {', '.join(MISSED)}, got {missed!r}")
    if isinstance(catch_up, bool) or not isinstance(catch_up, int):
        raise BadInput(f"{where}: catch_up must be an integer, got {catch_up!r}")
    if not 1 <= catch_up <= MAX_CATCH_UP:
        raise BadInput(f"{where}: catch_up must be 1..{MAX_CATCH_UP}, got {catch_up}")
    payload_json = jsonio.encode(payload, what=f"payload of {where}")
    return Schedule(
        name=name,
        kind=kind,
        cron=cron,
        every=every,
        timezone=timezone,
        payload_json=payload_json,
        queue=queue,
        priority=priority,
        missed=missed,
        catch_up=catch_up,
    )


# --- ticks -------------------------------------------------------------------------------


def tick_key(name: str, tick: float) -> str:
    """The idempotency key of one tick's job: one job per schedule and tick, ever."""
    return f"schedule:{name}:{iso(tick)}"


def iso(tick: float) -> str:
    return datetime.fromtimestamp(tick, UTC).isoformat()


def ticks_after(s: Schedule, after: float, until: float, limit: int) -> list[float]:
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


def _multiple(k: int, every: float) -> float:
    """Tick k of an interval, rounded to the microsecond: the same value in every process
    (and in the tick's key), without float noise such as 1000.0500000000001."""
    return round(k * every, 6)


def next_tick(s: Schedule, after: float) -> float | None:
    """The first tick after `after` (None if there is none within a year and a day)."""
    found = ticks_after(s, after, after + MAX_EVERY + 86400.0, 1)
    return found[0] if found else None


def newest_ticks(s: Schedule, after: float, until: float, n: int) -> list[float]:
    """The newest `n` ticks t with after < t <= until, oldest first."""
    if n < 1 or until <= after:
        return []
    if s.every is not None:
        top = math.floor(until / s.every) + 1  # one past: float division may fall short
        ticks = [_multiple(k, s.every) for k in range(top - n, top + 1)]
        return [t for t in ticks if after < t <= until][-n:]
    assert s.cron is not None
    start = datetime.fromtimestamp(until, s.zone) + timedelta(microseconds=1)
    walk = CronSim(s.cron, start, reverse=True)
    found: set[float] = set()
    for _ in range(n + _FOLD_STEPS):
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


@attrs.frozen
class Due:
    """What one pass does for one schedule: `ticks` to submit (oldest first) and
    `skipped`, the newest missed tick it leaves out (None if none was)."""

    ticks: list[float]
    skipped: float | None


def due(s: Schedule, last: float, now: float, limit: int) -> Due:
    """The ticks after `last` (the newest tick submitted) that are due at `now`.

    `skip`: ticks at most LATE_GRACE seconds late; `catch_up`: the newest `s.catch_up`
    due ticks. Older ticks are missed and skipped. At most `limit` ticks, oldest first.
    """
    if s.missed == "skip":
        start = max(last, now - LATE_GRACE)
        ticks = ticks_after(s, start, now, limit)
    else:
        ticks = newest_ticks(s, last, now, s.catch_up)[:limit]
    first = ticks_after(s, last, now, 1)
    skipped = None
    if first and (not ticks or first[0] < ticks[0]):
        older = newest_ticks(s, last, ticks[0] if ticks else now, 2 if ticks else 1)
        skipped = next((t for t in reversed(older) if not ticks or t < ticks[0]), None)
    return Due(ticks=ticks, skipped=skipped)
