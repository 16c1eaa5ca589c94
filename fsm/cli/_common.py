"""Helpers shared by the command modules: the store option, JSON output, records as dicts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import click

from .. import jsonio
from ..engine import Engine
from ..records import AuditEntry, Job
from ..registry import DEFAULT_STORE_URL, STORE_ENV, open_store, store_url
from ..secrets import redact_url

F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = (
    f"Store URL: memory://, sqlite:///path.db or postgresql://... "
    f"[default: ${STORE_ENV}, else {DEFAULT_STORE_URL}]"
)


def store_option(func: F) -> F:
    """`--store URL`; None means $JOBFSM_STORE, else the SQLite default."""
    return click.option("--store", "store", metavar="URL", default=None, help=STORE_HELP)(func)


def json_option(func: F) -> F:
    """`--json`: machine-readable output (one JSON document on stdout)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def actor_options(func: F) -> F:
    """`--actor NAME --reason TEXT`, both required for operator actions (audited)."""
    func = click.option(
        "--reason", required=True, help="Why (recorded in the audit trail; required)."
    )(func)
    return click.option(
        "--actor", required=True, help="Who is acting (recorded in the audit trail; required)."
    )(func)


@contextmanager
def engine_for(url: str | None) -> Iterator[Engine]:
    """An Engine over the store `url` names (see `fsm.registry.store_url`), closed after."""
    store = open_store(store_url(url))
    try:
        yield Engine(store)
    finally:
        store.close()


def parse_json(text: str, what: str) -> Any:
    """JSON from the command line, or BadInput naming the option."""
    return jsonio.decode(text, what=what)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def job_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-able data (payload and result decoded)."""
    data = attrs.asdict(job, recurse=False)
    data["owner"] = None if job.owner is None else job.owner.to_dict()
    data["payload"] = job.payload
    data["result"] = job.result
    del data["payload_json"], data["result_json"]
    return data


def entry_dict(entry: AuditEntry) -> dict[str, Any]:
    data = attrs.asdict(entry, recurse=False)
    data["data"] = entry.data
    del data["data_json"]
    return data


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def fmt_age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain left-aligned text table."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def redact(url: str) -> str:
    """A store URL fit to print: passwords masked (`fsm.secrets.redact_url`)."""
    return redact_url(url)
