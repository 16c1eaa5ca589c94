"""The `schedules` fault model: passes of several schedulers over schedules, against the
policy docs/schedules.md states ("What the policy guarantees").

Each example opens a fresh database and stores two schedules through the production
`Schedules.add`: one at a fixed interval (7 s, 60 s or an hour; missed ticks skipped or
caught up, `catch_up` 1 to 3) and one daily cron schedule, `30 2 * * *` in
Europe/Berlin, over a daylight-saving weekend (spring forward or fall back). Two or
three schedulers (`fsm.service.maintenance.Ticks`, each on its own store handle, as
separate workers hold) then pass with a per-pass bound of 1 to 4 ticks, while the
clock moves by steps from 1 s to a day (outages longer than the lateness bound
included), and a pass may be killed between submitting its ticks and recording them
(the store refuses its `advance_schedule` once).

The oracle is the documented policy, computed here from the schedule's definition
alone (ticks at whole multiples of the interval since the epoch; the daily cron tick
at 02:30 local time, 03:00 on the day 02:30 does not exist, the first 02:30 on the
day it happens twice), never from the production tick walk. Before each pass the
schedule's stored `last_tick` and `checked_at` give what a leading pass must do.

Promises:

- T1 exactly once: each tick has at most one job, and only ticks of the schedule
  after its creation have jobs; `last_tick` never moves back;
- T2 a leading pass submits exactly the oldest `limit` of the ticks the policy picks
  (every due tick when a scheduler handled the schedule within the lateness bound;
  else the newest `catch_up` of the missed ones, or none under `skip`, plus every
  tick younger than the bound); a following pass submits nothing;
- T3 a tick skipped as missed never gets a job later, and at the end every tick up
  to the last one handled has its job unless a pass skipped it.
"""

from __future__ import annotations

import calendar
import itertools
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..ports import HoldsSchedules, ScanRequest, Store
from ..service.engine import Engine
from ..service.maintenance.ticks import Ticks
from ..service.schedules import Schedule, Schedules, schedule
from ..service.timetable import LATE_GRACE
from .faults_commits import quiet
from .faults_machine import suite_policy
from .faults_models import ModelRun

KIND = "tick.job"
BERLIN = ZoneInfo("Europe/Berlin")
STEPS = (1.0, 5.0, 20.0, 44.0, 61.0, 200.0, 3000.0, 86400.0)
_step = st.one_of(
    st.tuples(st.just("pass"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("crash"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("advance"), st.sampled_from(STEPS), st.just(0)),
)
_example = st.fixed_dictionaries(
    {
        "every": st.sampled_from((7.0, 60.0, 3600.0)),
        "missed": st.sampled_from(("skip", "catch_up")),
        "catch_up": st.integers(1, 3),
        "spring": st.booleans(),
        "schedulers": st.integers(2, 3),
        "steps": st.lists(_step, min_size=4, max_size=24),
    }
)


def _last_sunday(year: int, month: int) -> int:
    last = calendar.monthrange(year, month)[1]
    return max(d for d in range(last - 6, last + 1) if calendar.weekday(year, month, d) == 6)


def daily_0230_berlin(day: datetime) -> float:
    """The UTC tick of `30 2 * * *` in Europe/Berlin on local `day` (docs/schedules.md)."""
    local = datetime(day.year, day.month, day.day, 2, 30, tzinfo=BERLIN)
    back = local.astimezone(UTC).astimezone(BERLIN)
    if (back.hour, back.minute) != (2, 30):  # no 02:30 today (spring forward): 03:00
        local = datetime(day.year, day.month, day.day, 3, 0, tzinfo=BERLIN)
    return local.replace(fold=0).astimezone(UTC).timestamp()


def ticks_between(s: Schedule, after: float, upto: float) -> list[float]:
    """The schedule's ticks in (after, upto], oldest first (bounded by the model's steps)."""
    if s.every is not None:
        k = math.floor(after / s.every) + 1
        out: list[float] = []
        while k * s.every <= upto:
            out.append(k * s.every)
            k += 1
        return out
    out = []
    day = datetime.fromtimestamp(after, BERLIN).date() - timedelta(days=1)
    while True:
        t = daily_0230_berlin(datetime(day.year, day.month, day.day))
        if t > upto:
            return out
        if t > after:
            out.append(t)
        day += timedelta(days=1)


class _RefusesAdvance:
    """A store handle whose next `advance_schedule` fails, as a scheduler killed between
    submitting its ticks and recording them (everything else is the store's)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.armed = False

    def advance_schedule(self, *args: Any, **kwargs: Any) -> bool:
        if self.armed:
            self.armed = False
            raise ConnectionError("scheduler killed between submit and advance")
        result: bool = self.inner.advance_schedule(*args, **kwargs)  # type: ignore[attr-defined]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SchedulesModel:
    name: ClassVar[str] = "schedules"
    about: ClassVar[str] = "scheduler passes, crashes between submit and advance, clock jumps, DST"
    examples: ClassVar[dict[str, int]] = {"quick": 15, "default": 100, "thorough": 1000}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            holds = isinstance(opener(), HoldsSchedules)
        if not holds:
            ctx.notes.append("schedules model not run: the store does not hold schedules")
            return
        years = itertools.count(2030)  # every example later than the last: old leads lapse

        @ctx.settings(self.examples[ctx.size])
        @given(example=_example)
        def one(example: dict[str, Any]) -> None:
            with ctx.database() as opener:
                world = _World(ctx, opener, example, next(years))
                try:
                    world.play(example["steps"])
                finally:  # a database shared by examples (PostgreSQL's run schema) keeps
                    world.remove()  # only this example's: every pass walks all schedules

        with quiet(("fsm.service.maintenance.ticks",)):  # a killed pass is logged, by design
            one()


class _World:
    def __init__(self, ctx: ModelRun, opener: Any, example: dict[str, Any], year: int) -> None:
        self.ctx = ctx
        month = 3 if example["spring"] else 10
        sunday = datetime(year, month, _last_sunday(year, month))
        # 100 s before the daylight-saving day's 02:30 tick: passes may reach it in time
        self.clock = FakeClock(daily_0230_berlin(sunday) - 100.0)
        tag = uuid.uuid4().hex[:8]
        self.queue = f"ticks-{tag}"
        kinds = {KIND: KindPolicy(queue=self.queue)}
        policy = suite_policy()
        admin = Engine(opener(), clock=self.clock, policy=policy, kinds=kinds)
        store = admin.store
        assert isinstance(store, HoldsSchedules)  # the model runs only on such stores
        self.store: Any = store
        self.schedules = [
            schedule(
                f"every-{tag}",
                KIND,
                every=example["every"],
                missed=example["missed"],
                catch_up=example["catch_up"],
                queue=self.queue,
                warn=False,
            ),
            schedule(
                f"cron-{tag}",
                KIND,
                cron="30 2 * * *",
                timezone="Europe/Berlin",
                queue=self.queue,
                warn=False,
            ),
        ]
        self.admin = Schedules(admin)
        for s in self.schedules:
            self.admin.add(s, actor="fault-model", reason="schedules model")
        self.handles = [_RefusesAdvance(opener()) for _ in range(example["schedulers"])]
        self.tickers = [
            Ticks(
                Engine(h, clock=self.clock, policy=policy, kinds=kinds),
                owner=f"ticks-{tag}-{i}",
                kinds=(KIND,),
            )
            for i, h in enumerate(self.handles)
        ]
        self.last: dict[str, float] = {}
        self.skipped: dict[str, set[float]] = {s.name: set() for s in self.schedules}

    def remove(self) -> None:
        for s in self.schedules:
            self.admin.remove(s.name, actor="fault-model", reason="example done")

    def _record(self, name: str) -> Any:
        return next(r for r in self.store.schedules() if r.name == name)

    def _present(self) -> dict[str, set[float]]:
        """Per schedule, the ticks that have a job (read from the jobs' keys); T1."""
        jobs = self.store.scan(ScanRequest(states=tuple(_states()), queues=(self.queue,)))
        keys = [j.idempotency_key or "" for j in jobs]
        if len(set(keys)) != len(keys):
            raise AssertionError(f"T1 a tick has two jobs: {sorted(keys)}")
        out: dict[str, set[float]] = {}
        for s in self.schedules:
            created = self._record(s.name).created_at
            prefix = f"schedule:{s.name}:"
            mine = [k[len(prefix) :] for k in keys if k and k.startswith(prefix)]
            ticks = {datetime.fromisoformat(k).timestamp() for k in mine}
            stray = [t for t in ticks if t <= created or not _is_tick(s, t)]
            if stray:
                raise AssertionError(f"T1 schedule {s.name}: jobs for no tick of it: {stray}")
            out[s.name] = ticks
        return out

    def play(self, steps: list[tuple[str, Any, int]]) -> None:
        stats = self.ctx.stats
        for op, arg, limit in steps:
            if op == "advance":
                self.clock.advance(arg)
                stats.faults[
                    "schedules: clock advances "
                    + ("past the lateness bound" if arg > LATE_GRACE else "a little")
                ] += 1
                continue
            i = arg % len(self.tickers)
            if op == "crash":
                self.handles[i].armed = True
            self._pass(i, limit, crashed=op == "crash")
            self.handles[i].armed = False
        present = self._present()
        for s in self.schedules:
            record = self._record(s.name)
            handled = record.last_tick if record.last_tick is not None else record.created_at
            lost = [
                t
                for t in ticks_between(s, record.created_at, handled)
                if t not in present[s.name] and t not in self.skipped[s.name]
            ]
            if lost:
                raise AssertionError(f"T3 schedule {s.name}: ticks handled without a job: {lost}")
        stats.checks["T3 every handled tick has its job unless skipped"] += 1

    def _pass(self, i: int, limit: int, *, crashed: bool) -> None:
        now = self.clock.now()
        before = self._present()
        records = {s.name: self._record(s.name) for s in self.schedules}
        ticker = self.tickers[i]
        ticker.run_once(limit)
        after = self._present()
        stats = self.ctx.stats
        stats.faults[f"schedules: pass{' killed before recording' if crashed else ''}"] += 1
        for s in self.schedules:
            new = after[s.name] - before[s.name]
            rec, now_rec = records[s.name], self._record(s.name)
            if not ticker.leading:
                if new:
                    raise AssertionError(f"T2 a following scheduler submitted {sorted(new)}")
                continue
            picks, skipped = self._policy(s, rec, now)
            submitted = picks[:limit]
            if new != set(submitted) - before[s.name]:
                raise AssertionError(
                    f"T2 schedule {s.name} ({s.missed}, catch_up {s.catch_up}): a pass at "
                    f"{now} with last_tick {rec.last_tick}, checked_at {rec.checked_at}, "
                    f"limit {limit} submitted {sorted(new)}; the policy picks "
                    f"{sorted(submitted)} (skipped {len(skipped)})"
                )
            if skipped:
                stats.faults[f"schedules: missed ticks ({s.missed})"] += 1
            if len(picks) > limit:
                stats.faults["schedules: more due than the per-pass bound"] += 1
            if s.cron is not None and any(self._dst_day(t) for t in new):
                stats.faults["schedules: the daylight-saving day's tick submitted"] += 1
            recorded = (now_rec.last_tick, now_rec.checked_at) != (rec.last_tick, rec.checked_at)
            if recorded:  # a pass killed before recording this schedule skipped nothing yet
                self.skipped[s.name] |= set(skipped) - before[s.name]
            old, last = self.last.get(s.name), now_rec.last_tick
            if old is not None and (last is None or last < old):
                raise AssertionError(f"T1 schedule {s.name}: last_tick moved back {old} -> {last}")
            if last is not None:
                self.last[s.name] = last
            back = self.skipped[s.name] & after[s.name] - before[s.name]
            if back:
                raise AssertionError(f"T3 schedule {s.name}: skipped ticks came back {back}")
        checks = stats.checks
        checks["T1 each tick at most one job, last_tick never back"] += 1
        checks["T2 a pass submits what the policy picks, within its bound"] += 1

    def _dst_day(self, t: float) -> bool:
        day = datetime.fromtimestamp(t, BERLIN)
        return day.utcoffset() != (day - timedelta(days=1)).astimezone(BERLIN).utcoffset()

    @staticmethod
    def _policy(s: Schedule, rec: Any, now: float) -> tuple[list[float], list[float]]:
        """docs/schedules.md, "Missed ticks": (ticks picked, oldest first; ticks skipped)."""
        last = rec.last_tick if rec.last_tick is not None else rec.created_at
        checked = rec.checked_at if rec.checked_at is not None else rec.created_at
        due = ticks_between(s, last, now)
        if now - checked <= LATE_GRACE:
            return due, []
        missed = [t for t in due if t <= now - LATE_GRACE]
        young = [t for t in due if t > now - LATE_GRACE]
        kept = missed[-s.catch_up :] if s.missed == "catch_up" and s.catch_up else []
        return kept + young, [t for t in missed if t not in kept]


def _is_tick(s: Schedule, t: float) -> bool:
    if s.every is not None:
        return t % s.every == 0
    day = datetime.fromtimestamp(t, BERLIN)
    return daily_0230_berlin(datetime(day.year, day.month, day.day)) == t


def _states() -> tuple[str, ...]:
    from ..lifecycle.spec import lifecycle

    return lifecycle().states
