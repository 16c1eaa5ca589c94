"""`jobfsm submit`: one job, from the command line."""

from __future__ import annotations

from typing import Any

import click

from ..errors import BadInput
from ..inputs import Unique, seconds
from ..jsonio import decode
from ..records import Job
from ..text import printable
from .apps import kind_policy
from .connect import engine_for
from .options import json_option, store_option
from .output import emit_json, job_dict


def _job_line(job: Job) -> str:
    return printable(f"job {job.id} ({job.kind}, queue {job.queue}): {job.state}")


def _unique(
    key: str | None, states: tuple[str, ...], period: float | None, refuse: bool
) -> Unique | None:
    """The --unique options as one `Unique` (checked by fsm.inputs like every submit's)."""
    if key is None:
        if states or period is not None or refuse:
            raise BadInput("--unique-state, --unique-period and --unique-refuse need --unique KEY")
        return None
    return Unique(
        key,
        states=states or None,
        period=period,
        on_duplicate="refuse" if refuse else "return",
    )


@click.command()
@click.argument("kind")
@click.option("--payload", default="null", show_default=True, help="JSON payload.")
@click.option("--queue", default=None, help="Queue name [default: the kind's, else 'default'].")
@click.option("--priority", type=int, default=None, help="Lower runs first [default: 0].")
@click.option("--delay", type=float, default=None, help="Seconds before it may run.")
@click.option(
    "--idempotency-key", default=None, help="A second submit with it returns the first job."
)
@click.option("--max-attempts", type=int, default=None, help="Attempt budget [default: 10].")
@click.option("--timeout", type=float, default=None, help="Per-attempt timeout in seconds.")
@click.option("--deadline-in", type=float, default=None, help="Fail if not done within SECONDS.")
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="JOB",
    help="Run only after this job succeeded; repeat for more (docs/dependencies.md).",
)
@click.option(
    "--on-failed-dependency",
    type=click.Choice(["cancel", "run", "investigate"]),
    default=None,
    help="What to do if a prerequisite fails [default: cancel].",
)
@click.option(
    "--retry-safe/--not-retry-safe",
    default=None,
    help="May a run lost to a crash run again? [default: the kind's policy where the "
    "submitter knows it; else not (a lost run goes to investigate)]. The worker running "
    "the kind enforces its handler's policy either way.",
)
@click.option(
    "--unique",
    "unique_key",
    default=None,
    metavar="KEY",
    help="At most one job of KIND with KEY in the scope: a duplicate returns the job "
    "(docs/uniqueness.md).",
)
@click.option(
    "--unique-state",
    "unique_states",
    multiple=True,
    metavar="STATE",
    help="A state of the --unique scope; repeat for more [default: the live states, or "
    "every state with --unique-period].",
)
@click.option(
    "--unique-period",
    type=float,
    default=None,
    metavar="SECONDS",
    help="The --unique scope holds jobs created less than SECONDS ago.",
)
@click.option(
    "--unique-refuse",
    is_flag=True,
    default=False,
    help="A duplicate of --unique fails (naming the job) instead of returning it.",
)
@click.option(
    "--app",
    "app",
    default=None,
    metavar="MODULE[:OBJ]",
    help="The handlers `jobfsm worker --app` runs: KIND's declaration there (payload type, "
    "queue, attempts...) applies, so a payload that does not fit its type is refused and "
    "nothing is stored (docs/typed-payloads.md) [default: none; the payload is stored "
    "unchecked].",
)
@store_option
@json_option
def submit(
    *,
    kind: str,
    payload: str,
    queue: str | None,
    priority: int | None,
    delay: float | None,
    idempotency_key: str | None,
    max_attempts: int | None,
    timeout: float | None,
    deadline_in: float | None,
    after: tuple[str, ...],
    on_failed_dependency: str | None,
    retry_safe: bool | None,
    unique_key: str | None,
    unique_states: tuple[str, ...],
    unique_period: float | None,
    unique_refuse: bool,
    app: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Submit one job of KIND."""
    value = decode(payload, what="--payload")
    opts: dict[str, Any] = {
        "queue": queue,
        "priority": priority,
        "delay": delay,
        "idempotency_key": idempotency_key,
        "max_attempts": max_attempts,
        "timeout": timeout,
        "retry_safe": retry_safe,
        "after": list(after) or None,
        "on_failed_dependency": on_failed_dependency,
        "unique": _unique(unique_key, unique_states, unique_period, unique_refuse),
    }
    policy = None if app is None else kind_policy(app, kind)
    with engine_for(store) as engine:
        if policy is not None:
            engine.register_kind(kind, policy)  # submit checks as the worker will read
        if deadline_in is not None:
            # checked like every submit option, by fsm.inputs (finite, positive)
            opts["deadline"] = engine.clock.now() + seconds(
                "--deadline-in", deadline_in, positive=True
            )
        before = engine.clock.now()
        job = engine.submit(kind, value, **{k: v for k, v in opts.items() if v is not None})
    existing = job.created_at < before
    if as_json:
        emit_json({"existing": existing, "job": job_dict(job)})
        return
    click.echo(("existing " if existing else "submitted ") + _job_line(job))
