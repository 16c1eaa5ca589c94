"""`jobfsm schedules list|add|remove|pause|resume|trigger|history`: schedules kept in the
store.

Every change (and every `trigger`) needs --actor and --reason and is kept in the store's
schedule audit trail, which `history` shows (a schedule's changes stay after it is
removed)."""

from __future__ import annotations

from typing import Any

import click

from ..display.format import fmt_time
from ..display.terminal import print_table
from ..jsonio import decode
from ..ports import ScheduleChange
from ..service.schedules import (
    DEFAULT_CATCH_UP,
    MAX_CATCH_UP,
    MIN_EVERY,
    MIN_SUBSECOND_EVERY,
    MISSED,
    Schedules,
    ScheduleView,
    iso,
    schedule,
)
from .connect import engine_for
from .options import actor_options, json_option, store_option
from .output import emit_json
from .root import FullHelpGroup

HEADER = (
    "name",
    "kind",
    "repeats",
    "missed",
    "status",
    "last tick (UTC)",
    "next tick (UTC)",
    "from",
)
HISTORY_HEADER = ("at (UTC)", "schedule", "action", "actor", "reason")


@click.group("schedules", cls=FullHelpGroup)
def schedules() -> None:
    """Periodic jobs: cron expressions or fixed intervals, each tick submitted once.

    Workers run the schedules (unless started with --no-scheduler); schedules declared
    in code (`@handlers.periodic`) are listed here too. See docs/schedules.md.
    """


def _missed(view: ScheduleView) -> str:
    s = view.schedule
    if s is None:
        return "-"
    return s.missed if s.missed == "skip" else f"catch_up {s.catch_up}"


def _view_dict(view: ScheduleView) -> dict[str, Any]:
    r, s = view.record, view.schedule
    return {
        "name": r.name,
        "origin": r.origin,
        "paused": r.paused,
        "definition": None if s is None else decode(s.to_json(), what="definition"),
        "error": view.error,
        "last_tick": r.last_tick,
        "last_tick_utc": None if r.last_tick is None else iso(r.last_tick),
        "next_tick": view.next_tick,
        "next_tick_utc": None if view.next_tick is None else iso(view.next_tick),
        "checked_at": r.checked_at,
        "handled": view.handled,
    }


def _status(view: ScheduleView) -> str:
    if view.record.paused:
        return "paused"
    if view.handled is False:
        return "active (no live worker handles its kind)"
    return "active"


@schedules.command("list")
@store_option
@json_option
def list_schedules(store: str | None, as_json: bool) -> None:
    """Every schedule with its last tick submitted and its next tick."""
    with engine_for(store, existing=True) as engine:
        views = Schedules(engine).list()
    if as_json:
        emit_json([_view_dict(v) for v in views])
        return
    if not views:
        click.echo("no schedules")
        return
    rows = [
        [
            v.record.name,
            "-" if v.schedule is None else v.schedule.kind,
            v.error or ("-" if v.schedule is None else v.schedule.spec),
            _missed(v),
            _status(v),
            fmt_time(v.record.last_tick),
            fmt_time(v.next_tick),
            v.record.origin,
        ]
        for v in views
    ]
    print_table(rows, HEADER)


@schedules.command("add")
@click.argument("name")
@click.option("--kind", required=True, help="Kind of the job each tick submits.")
@click.option("--cron", default=None, metavar="EXPR", help="Cron expression (5 or 6 fields).")
@click.option(
    "--every",
    type=float,
    default=None,
    metavar="SECONDS",
    help=f"Fixed interval, at least {MIN_EVERY:g} s (see --subsecond).",
)
@click.option(
    "--subsecond",
    is_flag=True,
    help=f"Allow --every under {MIN_EVERY:g} s (down to {MIN_SUBSECOND_EVERY:g} s); logged as a "
    "warning.",
)
@click.option(
    "--timezone", default="UTC", show_default=True, help="IANA timezone of --cron (DST aware)."
)
@click.option("--payload", default="null", show_default=True, help="JSON payload of each job.")
@click.option("--queue", default=None, help="Queue [default: the kind's, else 'default'].")
@click.option("--priority", type=int, default=None, help="Lower runs first [default: 0].")
@click.option(
    "--missed",
    type=click.Choice(MISSED),
    default="skip",
    show_default=True,
    help="Ticks missed while no scheduler ran: skip them, or catch up the newest N.",
)
@click.option(
    "--catch-up",
    type=click.IntRange(1, MAX_CATCH_UP),
    default=DEFAULT_CATCH_UP,
    show_default=True,
    help="With --missed catch_up: how many of the newest missed ticks run.",
)
@click.option("--replace", is_flag=True, help="Replace a schedule of this name.")
@actor_options
@store_option
def add(  # noqa: PLR0917 (click passes every option as a parameter)
    name: str,
    kind: str,
    cron: str | None,
    every: float | None,
    subsecond: bool,
    timezone: str,
    payload: str,
    queue: str | None,
    priority: int | None,
    missed: str,
    catch_up: int,
    replace: bool,
    actor: str,
    reason: str,
    store: str | None,
) -> None:
    """Add a schedule NAME: a job of --kind on --cron EXPR (in --timezone) or --every SECONDS.

    The first tick is the first one after now; nothing is stored if anything is wrong,
    including options its jobs would be refused with at submit. Audited (--actor,
    --reason).
    """
    s = schedule(
        name,
        kind,
        cron=cron,
        every=every,
        timezone=timezone,
        payload=decode(payload, what="--payload"),
        queue=queue,
        priority=priority,
        missed=missed,
        catch_up=catch_up,
        subsecond=subsecond,
    )
    with engine_for(store) as engine:
        added = Schedules(engine).add(s, actor=actor, reason=reason, replace=replace)
    if not added:
        raise click.UsageError(f"a schedule named {name!r} exists (use --replace to replace it)")
    click.echo(f"schedule {name}: {s.spec}, submits {kind}")


def _change(store: str | None, name: str, action: str, actor: str, reason: str) -> None:
    with engine_for(store, existing=True) as engine:
        service = Schedules(engine)
        act = {"remove": service.remove, "pause": service.pause, "resume": service.resume}
        done = act[action](name, actor=actor, reason=reason)
    if not done:
        raise click.UsageError(f"no schedule named {name!r}")


@schedules.command("remove")
@click.argument("name")
@actor_options
@store_option
def remove(name: str, actor: str, reason: str, store: str | None) -> None:
    """Remove schedule NAME (one declared in code comes back when a worker starts)."""
    _change(store, name, "remove", actor, reason)
    click.echo(f"schedule {name} removed")


@schedules.command("pause")
@click.argument("name")
@actor_options
@store_option
def pause(name: str, actor: str, reason: str, store: str | None) -> None:
    """Stop submitting ticks of NAME until it is resumed (ticks meanwhile are missed)."""
    _change(store, name, "pause", actor, reason)
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
@actor_options
@store_option
def resume(name: str, actor: str, reason: str, store: str | None) -> None:
    """Submit ticks of a paused schedule NAME again (missed ticks follow its policy)."""
    _change(store, name, "resume", actor, reason)
    click.echo(f"schedule {name} resumed")


@schedules.command("trigger")
@click.argument("name")
@actor_options
@store_option
@json_option
def trigger(name: str, actor: str, reason: str, store: str | None, as_json: bool) -> None:
    """Submit schedule NAME's job now, as its tick at this instant (a paused schedule too).

    The same call as the dashboard's "trigger now": the schedule's kind, payload, queue
    and priority, the tick's idempotency key; its ticks are not moved. Audited (--actor,
    --reason) as a `triggered` change that `history` shows with the job's id.
    """
    with engine_for(store, existing=True) as engine:
        job = Schedules(engine).trigger(name, actor=actor, reason=reason)
    if as_json:
        emit_json({"name": name, "job": job.id, "kind": job.kind, "state": job.state})
        return
    click.echo(f"schedule {name} triggered: job {job.id} ({job.kind}, {job.state})")


def _change_dict(c: ScheduleChange) -> dict[str, Any]:
    return {
        "name": c.name,
        "action": c.action,
        "actor": c.actor,
        "reason": c.reason,
        "at": c.at,
        "at_utc": iso(c.at),
        "definition": None if c.definition is None else decode(c.definition, what="definition"),
    }


@schedules.command("history")
@click.argument("name", required=False)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Most changes."
)
@store_option
@json_option
def history(name: str | None, limit: int, store: str | None, as_json: bool) -> None:
    """The audited changes of schedule NAME (of every schedule without NAME), newest first:
    who added, replaced, paused, resumed or removed it, when and why."""
    with engine_for(store, existing=True) as engine:
        changes = Schedules(engine).changes(name, limit)
    if as_json:
        emit_json([_change_dict(c) for c in changes])
        return
    if not changes:
        click.echo("no schedule changes" + ("" if name is None else f" for {name!r}"))
        return
    rows = [[fmt_time(c.at), c.name, c.action, c.actor, c.reason] for c in changes]
    print_table(rows, HISTORY_HEADER)
