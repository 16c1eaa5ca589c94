"""`jobfsm limits list|set|clear|history`: global limits kept in the store.

Every change needs --actor and --reason and is kept in the store's `limit_changes`,
which `history` shows. docs/flow-control.md."""

from __future__ import annotations

from typing import Any

import click

from ..display.format import fmt_time
from ..display.terminal import print_table
from ..lifecycle.limits import MIN_PERIOD, Limit
from ..service import limits as flow
from ..text import printable
from .connect import engine_for
from .options import actor_options, json_option, store_option
from .output import emit_json
from .root import FullHelpGroup

HEADER = ("limit", "concurrency", "rate", "holding", "waiting", "set by", "reason")
HISTORY_HEADER = ("at (UTC)", "limit", "actor", "reason", "before", "after")


@click.group("limits", cls=FullHelpGroup)
def limits() -> None:
    """Global limits per kind or queue: jobs running at once, leases per period.

    A limit holds across every worker of the store: each claim counts in its own
    transaction. KEY is kind:NAME or queue:NAME. See docs/flow-control.md.
    """


def _limit_dict(limit: Limit) -> dict[str, Any]:
    return {
        "key": limit.key,
        "concurrency": limit.concurrency,
        "rate": limit.rate,
        "period": limit.period,
        "origin": limit.origin,
        "actor": limit.actor,
        "reason": limit.reason,
        "at": limit.at,
    }


def _rate(limit: Limit) -> str:
    if limit.rate is None or limit.period is None:
        return "-"
    return f"{limit.rate}/{limit.period:g}s"


@limits.command("list")
@store_option
@json_option
def list_limits(store: str | None, as_json: bool) -> None:
    """Every limit with the jobs holding a slot and the jobs waiting."""
    with engine_for(store, existing=True) as engine:
        statuses = engine.limits()
    if as_json:
        emit_json(
            [{**_limit_dict(s.limit), "holding": s.holding, "waiting": s.waiting} for s in statuses]
        )
        return
    if not statuses:
        click.echo("no limits")
        return
    rows = [
        [
            printable(s.limit.key),
            "-" if s.limit.concurrency is None else str(s.limit.concurrency),
            _rate(s.limit),
            str(s.holding),
            str(s.waiting),
            printable(s.limit.actor),
            printable(s.limit.reason),
        ]
        for s in statuses
    ]
    print_table(rows, HEADER)


@limits.command("set")
@click.argument("key")
@click.option(
    "--concurrency", type=int, default=None, help="Jobs holding a lease at once, at most."
)
@click.option("--rate", type=int, default=None, help="Leases per --period, at most.")
@click.option(
    "--period",
    type=float,
    default=None,
    metavar="SECONDS",
    help=f"The window of --rate (at least {MIN_PERIOD:g} s).",
)
@click.option(
    "--new-kind", is_flag=True, help="Allow a kind not seen in the store yet (about to deploy)."
)
@actor_options
@store_option
def set_limit(  # noqa: PLR0917 (click passes every option as a parameter)
    key: str,
    concurrency: int | None,
    rate: int | None,
    period: float | None,
    new_kind: bool,
    actor: str,
    reason: str,
    store: str | None,
) -> None:
    """Limit KEY (kind:NAME or queue:NAME) across every worker; replaces its limit.

    Lowering a limit below the jobs holding a slot stops none of them: they finish,
    and no job of KEY is leased until fewer hold one. Audited (--actor, --reason).
    """
    with engine_for(store, existing=True) as engine:
        limit, before = flow.set_limit(
            engine.kernel,
            key,
            concurrency=concurrency,
            rate=rate,
            period=period,
            actor=actor,
            reason=reason,
            new_kind=new_kind,
        )
    was = "" if before is None else f" (was {before.describe()})"
    click.echo(f"limit {printable(key)}: {limit.describe()}{was}")


@limits.command("clear")
@click.argument("key")
@actor_options
@store_option
def clear_limit(key: str, actor: str, reason: str, store: str | None) -> None:
    """Remove the limit of KEY. Audited (--actor, --reason)."""
    with engine_for(store, existing=True) as engine:
        before = engine.clear_limit(key, actor=actor, reason=reason)
    if before is None:
        click.echo(f"{printable(key)} had no limit")
    else:
        click.echo(f"limit {printable(key)} cleared (was {before.describe()})")


@limits.command("history")
@click.argument("key", required=False)
@click.option("--limit", "count", type=click.IntRange(1, 10_000), default=50, show_default=True)
@store_option
@json_option
def history(key: str | None, count: int, store: str | None, as_json: bool) -> None:
    """The newest changes of limits (of KEY), newest first."""
    with engine_for(store, existing=True) as engine:
        changes = flow.limit_changes(engine.kernel, key, count)
    if as_json:
        emit_json(
            [
                {
                    "seq": c.seq,
                    "key": c.key,
                    "at": c.at,
                    "actor": c.actor,
                    "reason": c.reason,
                    "origin": c.origin,
                    "before": c.before,
                    "after": c.after,
                }
                for c in changes
            ]
        )
        return
    if not changes:
        click.echo("no changes")
        return
    rows = [
        [
            fmt_time(c.at),
            printable(c.key),
            printable(c.actor),
            printable(c.reason),
            c.before or "-",
            c.after or "-",
        ]
        for c in changes
    ]
    print_table(rows, HISTORY_HEADER)
