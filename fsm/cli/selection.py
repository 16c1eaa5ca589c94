"""Which jobs a command looks at: `--state`, `--queue`, `--kind` (each repeatable; a
job matches one value of each option given), oldest or newest first, at most a bound;
and the table a selection is shown as."""

from __future__ import annotations

from typing import Any

import click

from ..display.format import error_summary, fmt_time
from ..errors import BadInput
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest
from ..records import Job
from .connect import engine_for

#: the most jobs a read command looks at (list --limit is capped here too)
SCAN_CAP = 10_000


def checked_states(state: tuple[str, ...]) -> tuple[str, ...]:
    """The --state values checked against the lifecycle; none given means every state."""
    lc = lifecycle()
    for s in state:
        if s not in lc.states:
            raise BadInput(f"unknown state {s!r}; known: {', '.join(lc.states)}")
    return tuple(dict.fromkeys(state)) or tuple(lc.states)


def filter_options(func: Any) -> Any:
    func = click.option(
        "--kind", "kind", multiple=True, help="Only jobs of this kind (repeatable)."
    )(func)
    func = click.option(
        "--queue", "queue", multiple=True, help="Only jobs in this queue (repeatable)."
    )(func)
    return click.option(
        "--state",
        "state",
        multiple=True,
        help="Only jobs in this state (repeatable; see `jobfsm diagram`).",
    )(func)


def select_jobs(
    store: str | None,
    state: tuple[str, ...],
    queue: tuple[str, ...],
    kind: tuple[str, ...],
    limit: int,
    *,
    newest_first: bool = False,
) -> list[Job]:
    """The jobs a filter selects, oldest first (newest first with `newest_first`), at
    most `limit` (the scan is capped at SCAN_CAP)."""
    states = checked_states(state)
    with engine_for(store, existing=True) as engine:
        jobs = engine.scan(
            ScanRequest(
                states=states,
                queues=tuple(dict.fromkeys(queue)) or None,
                kinds=tuple(dict.fromkeys(kind)) or None,
                limit=SCAN_CAP,
            )
        )
    ordered = sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=newest_first)
    return ordered[:limit]


def job_rows(jobs: list[Job]) -> list[list[str]]:
    return [
        [
            j.id,
            j.state,
            j.kind,
            j.queue,
            str(j.attempt),
            fmt_time(j.updated_at),
            error_summary(j.last_error, 80),
        ]
        for j in jobs
    ]


JOB_HEADER = ["id", "state", "kind", "queue", "attempt", "updated", "last error (first line)"]
