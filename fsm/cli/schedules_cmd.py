"""`jobfsm schedules list|add|remove|pause|resume`: schedules kept in the store."""

from __future__ import annotations

from typing import Any

import click

from ..schedules import DEFAULT_CATCH_UP, MAX_CATCH_UP, MISSED, iso, schedule
from ..scheduling import Schedules, ScheduleView
from . import cli
from ._common import (
    emit_json,
    engine_for,
    fmt_time,
    json_option,
    parse_json,
    print_table,
    store_option,
)

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


@cli.group("schedules")
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
        "definition": None if s is None else parse_json(s.to_json(), "definition"),
        "error": view.error,
        "last_tick": r.last_tick,
        "last_tick_utc": None if r.last_tick is None else iso(r.last_tick),
        "next_tick": view.next_tick,
        "next_tick_utc": None if view.next_tick is None else iso(view.next_tick),
    }


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
            "paused" if v.record.paused else "active",
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
@click.option("--every", type=float, default=None, metavar="SECONDS", help="Fixed interval.")
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
@store_option
def add(  # noqa: PLR0917 (click passes every option as a parameter)
    name: str,
    kind: str,
    cron: str | None,
    every: float | None,
    timezone: str,
    payload: str,
    queue: str | None,
    priority: int | None,
    missed: str,
    catch_up: int,
    replace: bool,
    store: str | None,
) -> None:
    """Add a schedule NAME: a job of --kind on --cron EXPR (in --timezone) or --every SECONDS.

    The first tick is the first one after now; nothing is stored if anything is wrong.
    """
    s = schedule(
        name,
        kind,
        cron=cron,
        every=every,
        timezone=timezone,
        payload=parse_json(payload, "--payload"),
        queue=queue,
        priority=priority,
        missed=missed,
        catch_up=catch_up,
    )
    with engine_for(store) as engine:
        added = Schedules(engine).add(s, replace=replace)
    if not added:
        raise click.UsageError(f"a schedule named {name!r} exists (use --replace to replace it)")
    click.echo(f"schedule {name}: {s.spec}, submits {kind}")


def _change(store: str | None, name: str, action: str) -> bool:
    with engine_for(store, existing=True) as engine:
        service = Schedules(engine)
        done: bool = getattr(service, action)(name)
    if not done:
        raise click.UsageError(f"no schedule named {name!r}")
    return done


@schedules.command("remove")
@click.argument("name")
@store_option
def remove(name: str, store: str | None) -> None:
    """Remove schedule NAME (one declared in code comes back when a worker starts)."""
    _change(store, name, "remove")
    click.echo(f"schedule {name} removed")


@schedules.command("pause")
@click.argument("name")
@store_option
def pause(name: str, store: str | None) -> None:
    """Stop submitting ticks of NAME until it is resumed (ticks meanwhile are missed)."""
    _change(store, name, "pause")
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
@store_option
def resume(name: str, store: str | None) -> None:
    """Submit ticks of a paused schedule NAME again (missed ticks follow its policy)."""
    _change(store, name, "resume")
    click.echo(f"schedule {name} resumed")
