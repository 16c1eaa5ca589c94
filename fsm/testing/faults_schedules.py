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
(the store refuses its `advance_schedule` once). Passes of two schedulers also
overlap, as when a scheduler stalls past its lead (a long GC pause, a slow store)
while another takes over: the production pass of one is held at one of its writes'
seams (just after it read the schedules, just before it submits one schedule's
ticks, or just before it records them) while the clock moves and another scheduler
passes whole; then the held pass goes on with what it read. The seam is the held
scheduler's store handle (`_Handle`): the pass itself is `Ticks.run_once`, unchanged.

The oracle is the documented policy, computed here from the schedule's definition
alone (ticks at whole multiples of the interval since the epoch; the daily cron tick
at 02:30 local time, 03:00 on the day 02:30 does not exist, the first 02:30 on the
day it happens twice), never from the production tick walk. Before each pass the
schedule's stored `last_tick` and `checked_at` give what a leading pass must do.

Promises:

- T1 exactly once: each tick has at most one job, and only ticks of the schedule
  after its creation have jobs; `last_tick` never moves back, and a leading pass that
  was not killed leaves it at the newest tick it handled or later (else the next pass
  takes those ticks as due again: only their idempotency keys, while the jobs are
  stored, keep them from running twice);
- T2 a leading pass submits exactly the oldest `limit` of the ticks the policy picks
  (every due tick when a scheduler handled the schedule within the lateness bound;
  else the newest `catch_up` of the missed ones, or none under `skip`, plus every
  tick younger than the bound); a following pass submits nothing;
- T3 a tick skipped as missed never gets a job from a pass that read the schedule
  after the skip was recorded, and at the end every tick up to the last one handled
  has its job unless a pass skipped it;
- T4 whatever passes overlap: each pass, held or not, submits what the policy picks
  from the record it read (T2, seen at the store's insert), a tick recorded as handled
  is never submitted again by a pass that read the schedule after it was recorded,
  and no pass moves `last_tick` back (a held pass records its ticks only over the
  value it read, as a compare-and-set, or over an older one after a lost race) nor
  `checked_at` (a held pass that records late keeps the newer pass's time).

- T5 one scheduler leads: after every pass at most one scheduler in the store holds a
  lead that has not lapsed, and a scheduler that passed (not held) leads unless another
  holds such a lead: a lapsed lead is taken over at the next pass.

T1, T4 and T5 are checked after every pass, the held one and the one that ran inside it.
T5 is also checked where schedulers take the lead truly at once: at the end of every
example, once no lead is live, its two or three schedulers, each on its own store
handle (and, on PostgreSQL, connection), beat at the same instant from threads of
their own (`HoldsSchedules.beat_scheduler`, as `Ticks` takes a lead), `RACES` times:
exactly one of them leads each time, and the store holds one live lead.
"""

from __future__ import annotations

import calendar
import itertools
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import attrs
from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..ports import HoldsSchedules, ScanRequest, SchedulerBeat, ScheduleRecord, Store
from ..records import Decision, Job
from ..service.engine import Engine
from ..service.maintenance.ticks import FORGET_AFTER, LEAD_FOR, Ticks
from ..service.schedules import Schedule, Schedules, schedule
from ..service.timetable import LATE_GRACE
from .faults_commits import quiet
from .faults_machine import suite_policy
from .faults_models import ModelRun

KIND = "tick.job"
BERLIN = ZoneInfo("Europe/Berlin")
STEPS = (1.0, 5.0, 20.0, 44.0, 61.0, 200.0, 3000.0, 86400.0)
#: where a held pass stops: after reading the schedules, before submitting one
#: schedule's ticks, before recording them (the writes `Ticks.run_once` makes)
SEAMS = ("read", "submit", "record")
#: how many times the example's schedulers race for the lead at its end
RACES = 3
#: real seconds a racing beat may wait for the others and take
RACE_WAIT = 30.0


@attrs.frozen
class Overlap:
    """`wait` seconds on, scheduler `held` passes (bound `limit`) and stalls at `seam`
    (of schedule number `which`, for `submit` and `record`) for `stall` seconds, while
    the `other`-th of the remaining schedulers passes whole (bound `other_limit`); then
    the held pass goes on with what it read. The wait gives the held pass ticks to
    submit and record (and lets a lead it does not hold lapse); a stall of LEAD_FOR or
    more lets the other lead too."""

    wait: float
    held: int
    limit: int
    seam: str
    which: int
    stall: float
    other: int
    other_limit: int


_step = st.one_of(
    st.tuples(st.just("pass"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("crash"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("advance"), st.sampled_from(STEPS), st.just(0)),
    st.builds(
        Overlap,
        wait=st.sampled_from((0.0, *STEPS)),
        held=st.integers(0, 2),
        limit=st.integers(1, 4),
        seam=st.sampled_from(SEAMS),
        which=st.integers(0, 1),
        stall=st.sampled_from(STEPS),
        other=st.integers(0, 1),
        other_limit=st.integers(1, 4),
    ),
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


class _Handle:
    """A scheduler's store handle (everything else is the store's) that

    - when `armed`, fails its next `advance_schedule`, as a scheduler killed between
      submitting its ticks and recording them;
    - when given a `hold` at a seam, runs it once there: after `schedules()` returns
      (`read`), before the `insert` of a schedule's ticks (`submit`), before that
      schedule's `advance_schedule` (`record`), as a scheduler stalled there;
    - logs the idempotency keys it inserts and the advances it makes, with their
      answers: what its pass did, whatever ran while it was held."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.armed = False
        self.hold: tuple[str, str, Callable[[], None]] | None = None
        self.inserted: list[str] = []
        self.advances: list[tuple[str, float | None, float | None, bool]] = []

    def _held(self, seam: str, name: str) -> None:
        if self.hold is not None and self.hold[:2] == (seam, name):
            run, self.hold = self.hold[2], None
            run()

    def schedules(self) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = self.inner.schedules()  # type: ignore[attr-defined]
        if self.hold is not None and self.hold[0] == "read":
            self._held("read", "")
        return records

    def insert(self, decisions: Sequence[Decision], capacity: Any = None) -> list[Job]:
        keys = [d.job.idempotency_key or "" for d in decisions]
        if self.hold is not None and any(k.startswith(f"schedule:{self.hold[1]}:") for k in keys):
            self._held("submit", self.hold[1])
        jobs = self.inner.insert(decisions, capacity)
        self.inserted += keys
        return jobs

    def advance_schedule(
        self, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        self._held("record", name)
        if self.armed:
            self.armed = False
            raise ConnectionError("scheduler killed between submit and advance")
        done: bool = self.inner.advance_schedule(name, expected, tick, at)  # type: ignore[attr-defined]
        self.advances.append((name, expected, tick, done))
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class _Pass:
    """What the model knew as one scheduler's pass began: the oracle's inputs."""

    ticker: int
    limit: int
    now: float
    records: dict[str, Any]
    present: dict[str, set[float]]
    #: per schedule, the newest last tick recorded, and the ticks recorded as skipped,
    #: before the pass read the schedule (T4: it must not submit those again)
    recorded: dict[str, float | None]
    skipped: dict[str, set[float]]


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
                    world.race_for_the_lead()
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
        names = {s.name for s in self.schedules}
        #: each schedule's creation time (fixed: read once)
        self.created = {r.name: r.created_at for r in store.schedules() if r.name in names}
        self.handles = [_Handle(opener()) for _ in range(example["schedulers"])]
        self.tickers = [
            Ticks(
                Engine(h, clock=self.clock, policy=policy, kinds=kinds),
                owner=f"ticks-{tag}-{i}",
                kinds=(KIND,),
            )
            for i, h in enumerate(self.handles)
        ]
        self.last: dict[str, float] = {}
        #: the newest `checked_at` seen, by schedule (T4: it never moves back)
        self.checked: dict[str, float] = {}
        self.skipped: dict[str, set[float]] = {s.name: set() for s in self.schedules}

    def race_for_the_lead(self) -> None:
        """T5 under true concurrency: once every lead lapsed, the example's schedulers
        beat at the same instant, each from its own thread on its own store handle;
        exactly one leads."""
        held = [h.inner for h in self.handles if isinstance(h.inner, HoldsSchedules)]
        tag = uuid.uuid4().hex[:8]
        for race in range(RACES):
            self.clock.advance(LEAD_FOR + 1.0)  # every lead of the example lapsed
            self._race_once(held, f"racer-{tag}-{race}")
        self.ctx.stats.checks["T5 one scheduler leads, and a lapsed lead is taken over"] += 1

    def _race_once(self, held: Sequence[HoldsSchedules], name: str) -> None:
        now = self.clock.now()
        barrier = threading.Barrier(len(held))
        led: list[bool] = []
        errors: list[BaseException] = []

        def beat(store: HoldsSchedules, k: int) -> None:
            try:
                barrier.wait(RACE_WAIT)
                me = SchedulerBeat(f"{name}-{k}", (KIND,), now)
                lead = store.beat_scheduler(
                    me, lead_until=now + LEAD_FOR, forget_before=now - FORGET_AFTER
                )
                led.append(lead)
            except BaseException as err:  # re-raised by the model's thread
                errors.append(err)

        threads = [
            threading.Thread(target=beat, args=(s, k), name="schedules-race", daemon=True)
            for k, s in enumerate(held)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(RACE_WAIT)
        if errors:
            raise errors[0]
        live = [b.owner for b in self.store.schedulers() if b.lead_until and b.lead_until > now]
        if led.count(True) != 1 or len(live) != 1:
            raise AssertionError(
                f"T5 {len(held)} schedulers took the lead at once at {now}: "
                f"{led.count(True)} were told they lead, the store holds {len(live)} "
                "live leads (exactly one must)"
            )
        self.ctx.stats.faults["schedules: schedulers race for the lead at once"] += 1

    def remove(self) -> None:
        for s in self.schedules:
            self.admin.remove(s.name, actor="fault-model", reason="example done")

    def _records(self) -> dict[str, Any]:
        """This example's schedules as stored, by name (one read: PostgreSQL's model time
        is mostly round trips)."""
        return {r.name: r for r in self.store.schedules() if r.name in self.created}

    def _present(self) -> dict[str, set[float]]:
        """Per schedule, the ticks that have a job (read from the jobs' keys); T1."""
        jobs = self.store.scan(ScanRequest(states=tuple(_states()), queues=(self.queue,)))
        keys = [j.idempotency_key or "" for j in jobs]
        if len(set(keys)) != len(keys):
            raise AssertionError(f"T1 a tick has two jobs: {sorted(keys)}")
        out: dict[str, set[float]] = {}
        for s in self.schedules:
            created = self.created[s.name]
            prefix = f"schedule:{s.name}:"
            mine = [k[len(prefix) :] for k in keys if k and k.startswith(prefix)]
            ticks = {datetime.fromisoformat(k).timestamp() for k in mine}
            stray = [t for t in ticks if t <= created or not _is_tick(s, t)]
            if stray:
                raise AssertionError(f"T1 schedule {s.name}: jobs for no tick of it: {stray}")
            out[s.name] = ticks
        return out

    def play(self, steps: list[Any]) -> None:
        stats = self.ctx.stats
        for step in steps:
            if isinstance(step, Overlap):
                self._overlap(step)
                continue
            op, arg, limit = step
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
            before = self._present()
            self._run(self._begin(i, limit, before), crashed=op == "crash")
            self.handles[i].armed = False
            self._stored(before, [i])
        present = self._present()
        records = self._records()
        for s in self.schedules:
            record = records[s.name]
            handled = record.last_tick if record.last_tick is not None else record.created_at
            lost = [
                t
                for t in ticks_between(s, record.created_at, handled)
                if t not in present[s.name] and t not in self.skipped[s.name]
            ]
            if lost:
                raise AssertionError(f"T3 schedule {s.name}: ticks handled without a job: {lost}")
        stats.checks["T3 every handled tick has its job unless skipped"] += 1

    def _overlap(self, step: Overlap) -> None:
        """One pass held at a seam while another scheduler passes whole (`Overlap`)."""
        stats = self.ctx.stats
        n = len(self.tickers)
        i = step.held % n
        others = [k for k in range(n) if k != i]
        j = others[step.other % len(others)]
        name = self.schedules[step.which].name if step.seam != "read" else ""
        seam = step.seam if step.seam == "read" else f"{step.seam} ({name.split('-')[0]})"
        ran: list[bool] = []

        def other() -> None:
            ran.append(True)
            self.clock.advance(step.stall)
            self._run(self._begin(j, step.other_limit, self._present()), crashed=False)

        wait = step.wait
        target = self.schedules[step.which]
        if step.seam == "submit" and target.cron is not None:
            # the cron schedule has one tick a day: the held pass reaches its submit
            # seam only with a tick due, so the clock lands just past the next one
            # (younger than the lateness bound: submitted whatever the policy)
            now = self.clock.now()
            wait = ticks_between(target, now, now + 2 * 86400.0)[0] - now + 1.0
        self.clock.advance(wait)
        before = self._present()
        held = self._begin(i, step.limit, before)
        self.handles[i].hold = (step.seam, name, other)
        self._run(held, crashed=False, overlap=seam)
        self.handles[i].hold = None
        if not ran:  # it followed, or had nothing to submit or record there: after it
            stats.faults["schedules: overlap: the held pass never reached its seam"] += 1
            other()
        else:
            stats.faults[f"schedules: overlap: a pass held at {seam}, another passed"] += 1
            if self.tickers[j].leading:
                stats.faults["schedules: overlap: both led (the held lead lapsed)"] += 1
        refused = [a for a in self.handles[i].advances if not a[3]]
        if ran and refused:
            stats.faults["schedules: overlap: the held pass lost its compare-and-set"] += 1
        self._stored(before, [i, j])

    def _begin(self, i: int, limit: int, present: dict[str, set[float]]) -> _Pass:
        self.handles[i].inserted.clear()
        self.handles[i].advances.clear()
        return _Pass(
            ticker=i,
            limit=limit,
            now=self.clock.now(),
            records=self._records(),
            present=present,
            recorded=dict(self.last),
            skipped={name: set(ticks) for name, ticks in self.skipped.items()},
        )

    def _stored(self, before: dict[str, set[float]], tickers: list[int]) -> None:
        """The jobs a step added are the ticks its passes inserted (T1: once each)."""
        after = self._present()
        for s in self.schedules:
            inserted: set[float] = set()
            for i in tickers:
                inserted |= _ticks(s.name, self.handles[i].inserted)
            if after[s.name] - before[s.name] != inserted - before[s.name]:
                raise AssertionError(
                    f"T1 schedule {s.name}: the passes inserted {sorted(inserted)}, but the "
                    f"store added jobs for {sorted(after[s.name] - before[s.name])}"
                )

    def _run(self, p: _Pass, *, crashed: bool, overlap: str | None = None) -> None:
        ticker = self.tickers[p.ticker]
        ticker.run_once(p.limit)
        handle = self.handles[p.ticker]
        stats = self.ctx.stats
        stats.faults[f"schedules: pass{' killed before recording' if crashed else ''}"] += 1
        stored = self._records()
        for s in self.schedules:
            rec, now_rec = p.records[s.name], stored[s.name]
            new = _ticks(s.name, handle.inserted)
            self._never_back(s.name, now_rec.last_tick, overlap)
            self._checked_never_back(s.name, now_rec.checked_at, overlap)
            if not ticker.leading:
                if new:
                    raise AssertionError(f"T2 a following scheduler submitted {sorted(new)}")
                continue
            picks, skipped = self._policy(s, rec, p.now)
            submitted = picks[: p.limit]
            if new != set(submitted):
                raise AssertionError(
                    f"T2 schedule {s.name} ({s.missed}, catch_up {s.catch_up}): a pass at "
                    f"{p.now} with last_tick {rec.last_tick}, checked_at {rec.checked_at}, "
                    f"limit {p.limit} submitted {sorted(new)}; the policy picks "
                    f"{sorted(submitted)} (skipped {len(skipped)})"
                    + (f"; it was held at {overlap}" if overlap else "")
                )
            done = p.recorded.get(s.name)
            again = sorted(t for t in new if done is not None and t <= done)
            if again:
                raise AssertionError(
                    f"T4 schedule {s.name}: a pass that read it after tick {done} was recorded "
                    f"submitted {again} again (last_tick it read: {rec.last_tick})"
                )
            if skipped:
                stats.faults[f"schedules: missed ticks ({s.missed})"] += 1
            if len(picks) > p.limit:
                stats.faults["schedules: more due than the per-pass bound"] += 1
            if s.cron is not None and any(self._dst_day(t) for t in new):
                stats.faults["schedules: the daylight-saving day's tick submitted"] += 1
            if any(a[0] == s.name and a[3] for a in handle.advances):
                # a pass killed before recording this schedule skipped nothing yet
                self.skipped[s.name] |= set(skipped) - p.present[s.name]
            back = p.skipped[s.name] & new
            if back:
                raise AssertionError(f"T3 schedule {s.name}: skipped ticks came back {back}")
            handled = submitted[-1] if submitted else max(skipped, default=None)
            if (
                not crashed
                and handled is not None
                and (now_rec.last_tick is None or now_rec.last_tick < handled)
            ):
                raise AssertionError(
                    f"T1 schedule {s.name}: a leading pass at {p.now} handled ticks up to "
                    f"{handled} and was not killed, but the last tick stored is "
                    f"{now_rec.last_tick}: the next pass takes them as due again"
                )
        self._one_leads(ticker, overlap)
        checks = stats.checks
        checks["T1 each tick at most one job, last_tick never back, a pass records"] += 1
        checks["T2 a pass submits what the policy picks, within its bound"] += 1
        if overlap is not None:
            checks[
                "T4 a held pass submits what it read, never moves last_tick or checked_at back"
            ] += 1

    def _one_leads(self, ticker: Ticks, overlap: str | None) -> None:
        """T5 from the store's schedulers after a pass: at most one holds a lead that
        has not lapsed; and after a pass that was not held, its scheduler leads unless
        another holds such a lead (a lapsed lead is taken over at the next pass)."""
        now = self.clock.now()
        live = [b.owner for b in self.store.schedulers() if b.lead_until and b.lead_until > now]
        if len(live) > 1:
            raise AssertionError(f"T5 {len(live)} schedulers lead at {now}: {sorted(live)}")
        if overlap is None and not ticker.leading and not [o for o in live if o != ticker.owner]:
            raise AssertionError(
                f"T5 scheduler {ticker.owner} passed at {now} and does not lead, though no "
                "other scheduler holds a lead that has not lapsed"
            )
        self.ctx.stats.checks["T5 one scheduler leads, and a lapsed lead is taken over"] += 1

    def _never_back(self, name: str, last: float | None, overlap: str | None) -> None:
        old = self.last.get(name)
        if old is not None and (last is None or last < old):
            raise AssertionError(
                f"{'T4' if overlap else 'T1'} schedule {name}: last_tick moved back {old} -> "
                f"{last}"
                + (f" (a pass held at {overlap} recorded what it read)" if overlap else "")
            )
        if last is not None:
            self.last[name] = last

    def _checked_never_back(self, name: str, checked: float | None, overlap: str | None) -> None:
        """T4: `checked_at` never moves back. A pass recorded after a later one (held,
        or retrying after a lost race) that wrote its own older time would make the
        schedule look unattended since then, and the next pass would skip as missed
        ticks a scheduler was there to run."""
        old = self.checked.get(name)
        if old is not None and (checked is None or checked < old):
            raise AssertionError(
                f"T4 schedule {name}: checked_at moved back {old} -> {checked}"
                + (f" (a pass held at {overlap} recorded its older time)" if overlap else "")
            )
        if checked is not None:
            self.checked[name] = checked

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


def _ticks(name: str, keys: list[str]) -> set[float]:
    """The ticks of schedule `name` among idempotency keys (`tick_key`)."""
    prefix = f"schedule:{name}:"
    return {
        datetime.fromisoformat(k[len(prefix) :]).timestamp() for k in keys if k.startswith(prefix)
    }


def _is_tick(s: Schedule, t: float) -> bool:
    if s.every is not None:
        return t % s.every == 0
    day = datetime.fromtimestamp(t, BERLIN)
    return daily_0230_berlin(datetime(day.year, day.month, day.day)) == t


def _states() -> tuple[str, ...]:
    from ..lifecycle.spec import lifecycle

    return lifecycle().states
