"""Commands on the store itself: prune (retention) and migrate (schema)."""

from __future__ import annotations

import click

from ..inputs import check_name, seconds
from ..lifecycle.spec import lifecycle
from ..ports import Migratable
from ..registry import open_store, store_url
from ..secrets import redact_url
from .connect import engine_for
from .options import store_option
from .selection import SCAN_CAP


@click.command()
@click.option(
    "--batch",
    type=click.IntRange(1, SCAN_CAP),
    default=1000,
    show_default=True,
    help="Rows per batch.",
)
@click.option(
    "--max-batches", type=click.IntRange(min=1), default=1000, show_default=True, help="Bound."
)
@click.option(
    "--keep",
    "keeps",
    multiple=True,
    metavar="QUEUE:STATE=DAYS",
    help="A queue's own retention for a finished state, in days ('forever' keeps them); "
    "repeat for more (e.g. --keep audit:succeeded=90 --keep audit:cancelled=forever).",
)
@store_option
def prune(batch: int, max_batches: int, keeps: tuple[str, ...], store: str | None) -> None:
    """Delete finished jobs past their retention (succeeded and cancelled: 7 days).

    Failed jobs and jobs in investigate are kept until an operator handles them. A
    queue can keep its jobs longer or shorter with --keep; the others follow the
    engine's policy (Limits.retention, and Limits.queue_retention when embedding).
    """
    rules: dict[str, dict[str, float | None]] = {}
    for keep in keeps:
        queue, state, days = _parse_keep(keep)
        rules.setdefault(queue, {})[state] = days
    with engine_for(store) as engine:
        n = engine.prune(limit=batch, max_batches=max_batches, queue_retention=rules)
    click.echo(f"pruned {n} job(s)")


def _parse_keep(text: str) -> tuple[str, str, float | None]:
    """QUEUE:STATE=DAYS -> (queue, state, seconds or None for 'forever')."""
    head, eq, value = text.partition("=")
    queue, colon, state = head.partition(":")
    terminal = sorted(lifecycle().terminal)
    if not eq or not colon or state not in terminal:
        raise click.BadParameter(
            f"{text!r}: expected QUEUE:STATE=DAYS with STATE one of {', '.join(terminal)}",
            param_hint="'--keep'",
        )
    check_name("queue", queue)
    if value == "forever":
        return queue, state, None
    return queue, state, seconds("--keep days", _float(value), positive=True) * 86400.0


def _float(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value  # refused by `seconds`, which names it


@click.command()
@click.argument("url", required=False)
def migrate(url: str | None) -> None:
    """Create or upgrade the store's schema (URL default: --store rules).

    Stores without a schema (memory://) have nothing to do.
    """
    target = store_url(url)
    store = open_store(target)  # opening applies what is missing (unless ?migrate=false)
    try:
        if not isinstance(store, Migratable):
            click.echo(f"{redact_url(target)}: nothing to migrate")
            return
        applied = store.migrate()
        version = store.schema_version()
    finally:
        store.close()
    at = "" if version is None else f" at version {version}"
    if applied:
        versions = ", ".join(str(v) for v in applied)
        click.echo(f"{redact_url(target)}: applied schema migration(s) {versions}; schema{at}")
    else:
        click.echo(f"{redact_url(target)}: schema{at}, up to date")
