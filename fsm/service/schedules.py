"""Schedules: what a periodic job is (a cron expression or a fixed interval), and
`Schedules`, the schedules a store keeps, changed by audited operator actions.

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
When ticks fall and which a pass submits is `fsm.service.timetable` (pure; its names
are re-exported here).

`Schedules` keeps them in a store (declared in code or added by an operator); the
maintenance service `fsm.service.maintenance.ticks` submits their ticks, each exactly
once however many schedulers run (its docstring says how).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from .. import jsonio
from ..errors import BadInput, JobFSMError
from ..inputs import check_name, check_operator_text, new_job, seconds
from ..ports import (
    HoldsSchedules,
    NotesScheduleChanges,
    ScheduleChange,
    SchedulerBeat,
    ScheduleRecord,
)
from ..records import Job
from . import plans
from .kernel import Kernel, KernelSource
from .timetable import (
    LATE_GRACE,
    MAX_EVERY,
    Due,
    count_ticks,
    due,
    iso,
    newest_ticks,
    next_tick,
    tick_key,
    ticks_after,
)
from .writes import run

__all__ = [
    "DEFAULT_CATCH_UP",
    "LATE_GRACE",
    "MAX_CATCH_UP",
    "MAX_EVERY",
    "MAX_SCHEDULES",
    "MIN_EVERY",
    "MIN_SUBSECOND_EVERY",
    "MISSED",
    "ORIGINS",
    "Due",
    "Schedule",
    "ScheduleView",
    "Schedules",
    "count_ticks",
    "due",
    "holding",
    "iso",
    "newest_ticks",
    "next_tick",
    "schedule",
    "tick_key",
    "ticks_after",
]

log = logging.getLogger(__name__)

#: what a scheduler does with ticks missed while no scheduler ran (docs/schedules.md)
MISSED = ("skip", "catch_up")
#: `catch_up`: the newest N missed ticks run (default, and the most allowed)
DEFAULT_CATCH_UP = 10
MAX_CATCH_UP = 1000
#: the floor of `every`: shorter intervals need `subsecond=True` (and are logged) ...
MIN_EVERY = 1.0
#: ... and never go below this (100 jobs a second from one schedule)
MIN_SUBSECOND_EVERY = 0.01
#: most schedules one store keeps (each costs the leading scheduler a read per pass)
MAX_SCHEDULES = 1000
#: schedule names: they are part of each tick's idempotency key
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
#: the job id a schedule's options are checked with (never stored)
_PROBE_ID = "schedule-check"


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
    #: the operator allowed an interval under MIN_EVERY (down to MIN_SUBSECOND_EVERY)
    subsecond: bool = False

    @property
    def spec(self) -> str:
        """How it repeats, as `jobfsm schedules list` shows it."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {self.every:g} s"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def options(self, tick: float) -> dict[str, Any]:
        """The submit options of tick `tick`'s job (the one place they are made)."""
        opts: dict[str, Any] = {"idempotency_key": tick_key(self.name, tick)}
        if self.queue is not None:
            opts["queue"] = self.queue
        if self.priority is not None:
            opts["priority"] = self.priority
        return opts

    def payload(self) -> Any:
        return jsonio.decode(self.payload_json, what=f"payload of schedule {self.name!r}")

    def to_json(self) -> str:
        """The stored definition: canonical JSON, compared as text by `declare`."""
        return jsonio.canonical(attrs.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        """A stored definition, validated again (BadInput if it is not one). One stored
        before the floor of `every` (no `subsecond` field) keeps its interval."""
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
        if "subsecond" not in data:
            every = data.get("every")
            data["subsecond"] = isinstance(every, int | float) and every < MIN_EVERY
        return schedule(payload=jsonio.decode(payload_json), warn=False, **data)


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
    subsecond: bool = False,
    warn: bool = True,
) -> Schedule:
    """A Schedule, or BadInput naming what is wrong (nothing else happens).

    Its job's kind, queue and priority are checked by submit's own rules
    (`fsm.inputs.new_job`), so a schedule that could never submit is refused here.
    `every` under MIN_EVERY (1 s) needs `subsecond=True` and is logged as a warning
    (`warn=False`: not logged, for a definition read back from a store)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadInput(
            f"a schedule name must be 1-100 characters of letters, digits, '_', '.' or '-'; "
            f"got {name!r:.80}"
        )
    where = f"schedule {name!r}"
    check_name(f"{where}: kind", kind)
    if (cron is None) == (every is None):
        raise BadInput(f"{where}: give exactly one of a cron expression or an interval (every)")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as err:
        raise BadInput(f"{where}: unknown timezone {timezone!r:.80} (an IANA name)") from err
    if cron is not None:
        cron = _cron(where, cron, zone)
    if not isinstance(subsecond, bool):
        raise BadInput(f"{where}: subsecond must be true or false, got {subsecond!r:.80}")
    if every is not None:
        every = _every(where, every, subsecond, warn)
    if missed not in MISSED:
        raise BadInput(f"{where}: missed must be one of {', '.join(MISSED)}, got {missed!r:.80}")
    if isinstance(catch_up, bool) or not isinstance(catch_up, int):
        raise BadInput(f"{where}: catch_up must be an integer, got {catch_up!r:.80}")
    if not 1 <= catch_up <= MAX_CATCH_UP:
        raise BadInput(f"{where}: catch_up must be 1..{MAX_CATCH_UP}, got {catch_up}")
    payload_json = jsonio.encode(payload, what=f"payload of {where}")
    s = Schedule(
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
        subsecond=subsecond,
    )
    try:  # submit's own check of every option a tick's job will carry
        new_job(_PROBE_ID, kind, payload_json, s.options(0.0), None, **_PROBE_DEFAULTS)
    except BadInput as err:
        raise BadInput(f"{where}: its jobs could never be submitted: {err}") from err
    return s


_PROBE_DEFAULTS: dict[str, Any] = {"now": 0.0, "default_attempts": 1, "default_recoveries": 0}


def _cron(where: str, cron: object, zone: ZoneInfo) -> str:
    if not isinstance(cron, str) or not cron.isprintable() or len(cron) > 200:
        raise BadInput(f"{where}: a cron expression is printable text, got {cron!r:.80}")
    cron = " ".join(cron.split())
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=zone)))
    except (CronSimError, StopIteration, ValueError) as err:
        raise BadInput(f"{where}: bad cron expression {cron!r}: {err or 'no tick'}") from err
    return cron


def _every(where: str, every: object, subsecond: bool, warn: bool) -> float:
    value = seconds(f"{where}: every", every, positive=True)
    floor = MIN_SUBSECOND_EVERY if subsecond else MIN_EVERY
    if not floor <= value <= MAX_EVERY:
        hint = "" if subsecond else f" (under {MIN_EVERY:g} s: subsecond=True, --subsecond)"
        raise BadInput(f"{where}: every must be {floor:g}..{MAX_EVERY:g} seconds{hint}")
    if warn and value < MIN_EVERY:
        log.warning(
            "%s: every %g s is under the %g s floor (allowed by subsecond): up to %d jobs a "
            "second from this schedule alone",
            where,
            value,
            MIN_EVERY,
            round(1 / value),
        )
    return value


# --- schedules in a store ------------------------------------------------------------


def holding(kernel: Kernel) -> HoldsSchedules:
    """The kernel's store as a keeper of schedules, or BadInput naming the store."""
    store = kernel.store
    if not isinstance(store, HoldsSchedules):
        raise BadInput(f"{type(store).__name__} cannot keep schedules")
    return store


#: where a schedule was declared: in the application's code, or by `jobfsm schedules add`
ORIGINS = ("code", "cli")
#: the actor of the changes a worker makes when it stores the schedules declared in code
CODE_ACTOR = "code"


@attrs.frozen
class ScheduleView:
    """A stored schedule as `jobfsm schedules list` shows it: `schedule` is None (and
    `error` says why) if its stored definition is not valid. `handled`: a live worker
    handles its kind (None: no scheduler has said which kinds it handles)."""

    record: ScheduleRecord
    schedule: Schedule | None
    next_tick: float | None
    error: str | None = None
    handled: bool | None = None


class Schedules:
    """The schedules of a kernel's store (`fsm.ports.HoldsSchedules`), as operators and
    code declare them; every change is audited (actor and reason, `changes`). Their
    ticks are submitted by `fsm.service.maintenance.ticks`."""

    def __init__(self, source: KernelSource) -> None:
        self.source = source

    def _store(self) -> HoldsSchedules:
        return holding(self.source.kernel)

    def _change(
        self, name: str, action: str, actor: str, reason: str, definition: str | None = None
    ) -> ScheduleChange:
        what = f"schedule {name!r}: {action[:-1] if action.endswith('ed') else action}"
        check_operator_text(what, "actor", actor)
        check_operator_text(what, "reason", reason)
        now = self.source.kernel.clock.now()
        return ScheduleChange(name, action, actor, reason, now, definition)

    # --- operators ---------------------------------------------------------------------

    def check(self, s: Schedule) -> None:
        """Refuse (BadInput) a schedule whose jobs this engine would refuse at submit:
        the engine's own submit decision for one tick, written nowhere."""
        kernel = self.source.kernel
        try:
            kernel.submit_decision(kernel.clock.now(), s.kind, s.payload(), **s.options(0.0))
        except BadInput as err:
            raise BadInput(
                f"schedule {s.name!r}: its jobs could never be submitted: {err}"
            ) from err

    def add(
        self, s: Schedule, *, actor: str, reason: str, origin: str = "cli", replace: bool = False
    ) -> bool:
        """Store `s`, audited; False if its name is taken (and `replace` is not set).
        BadInput if its jobs could never be submitted, or the store holds MAX_SCHEDULES."""
        if origin not in ORIGINS:
            raise BadInput(f"schedule origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
        self.check(s)
        store = self._store()
        stored = store.schedules()
        taken = any(r.name == s.name for r in stored)
        if not taken and len(stored) >= MAX_SCHEDULES:
            raise BadInput(
                f"schedule {s.name!r}: the store keeps at most {MAX_SCHEDULES} schedules "
                "(fsm.service.schedules.MAX_SCHEDULES); remove one first"
            )
        action = "replaced" if taken else "added"
        change = self._change(s.name, action, actor, reason, s.to_json())
        now = change.at
        record = ScheduleRecord(s.name, s.to_json(), origin, created_at=now, updated_at=now)
        return store.save_schedule(record, change, replace=replace)

    def declare(self, schedules: Iterable[Schedule], *, by: str = CODE_ACTOR) -> None:
        """Store the schedules declared in code, replacing a stored definition that
        differs (its paused flag and last tick are kept); audited with actor `by`."""
        stored = {r.name: r for r in self._store().schedules()}
        for s in schedules:
            old = stored.get(s.name)
            if old is not None and old.definition == s.to_json() and old.origin == "code":
                continue
            if old is not None and old.origin != "code":
                log.warning("schedule %s: the definition in code replaces the one stored", s.name)
            why = "declared in code" if old is None else "declared in code, changed"
            self.add(s, actor=by, reason=why, origin="code", replace=True)

    def remove(self, name: str, *, actor: str, reason: str) -> bool:
        return self._store().delete_schedule(self._change(name, "removed", actor, reason))

    def pause(self, name: str, *, actor: str, reason: str) -> bool:
        return self._store().pause_schedule(self._change(name, "paused", actor, reason), True)

    def resume(self, name: str, *, actor: str, reason: str) -> bool:
        return self._store().pause_schedule(self._change(name, "resumed", actor, reason), False)

    def trigger(self, name: str, *, actor: str, reason: str) -> Job:
        """Submit schedule `name`'s job now, outside its ticks, as the tick at this
        instant (`Schedule.options`: the same kind, payload, queue, priority, and the
        tick's idempotency key). BadInput if there is no such schedule; a paused one
        may be triggered. Recorded as a `triggered` schedule change (actor, reason, the
        job's id) once the job is submitted, where the store keeps such notes (the
        built-in ones do); logged at WARNING and traced as an operator action."""
        check_operator_text(f"trigger of schedule {name!r}", "actor", actor)
        check_operator_text(f"trigger of schedule {name!r}", "reason", reason)
        kernel = self.source.kernel
        record = next((r for r in self._store().schedules() if r.name == name), None)
        if record is None:
            raise BadInput(f"no schedule named {name[:100]!r}")
        s = Schedule.from_json(record.definition)
        with kernel.observers.operator("trigger", name, actor):
            items = [(s.kind, s.payload(), s.options(kernel.clock.now()))]
            (job,) = run(kernel, plans.submit_many(kernel, items))
        store = kernel.store
        if isinstance(store, NotesScheduleChanges):
            change = self._change(name, "triggered", actor, reason, json.dumps({"job": job.id}))
            store.note_schedule_change(change)
        log.warning("schedule %s triggered by %s: %s (job %s)", name, actor, reason, job.id)
        return job

    def changes(self, name: str | None = None, limit: int = 50) -> list[ScheduleChange]:
        """The newest `limit` (1..1000) audited changes, of `name` or of all, newest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise BadInput(f"limit must be an integer from 1 to 1000; got {limit!r:.80}")
        return self._store().schedule_changes(name, limit)

    def list(self) -> list[ScheduleView]:
        kernel = self.source.kernel
        now = kernel.clock.now()
        store = self._store()
        kinds = live_kinds(store.schedulers(), now)
        out = []
        for record in store.schedules():
            try:
                s = Schedule.from_json(record.definition)
            except JobFSMError as err:
                out.append(ScheduleView(record, None, None, str(err)))
                continue
            after = max(now, record.last_tick if record.last_tick is not None else now)
            nxt = None if record.paused else next_tick(s, after)
            handled = None if kinds is None else s.kind in kinds
            out.append(ScheduleView(record, s, nxt, handled=handled))
        return out


#: a scheduler last seen this long ago is no longer live (it beats at least every
#: `fsm.service.maintenance.ticks.BEAT_EVERY` seconds)
LIVE_FOR = 30.0


def live_kinds(beats: Iterable[SchedulerBeat], now: float) -> frozenset[str] | None:
    """The kinds the live schedulers' workers handle (None: no scheduler is live)."""
    live = [b for b in beats if now - b.at <= LIVE_FOR]
    if not live:
        return None
    return frozenset(k for b in live for k in b.kinds)
