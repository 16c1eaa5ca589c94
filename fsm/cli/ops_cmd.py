"""Operator and service commands: submit, status, list, inspect, cancel, requeue,
resolve, prune, migrate.

Operator actions (cancel, requeue, resolve) need --actor and --reason, both written
to the job's audit trail. Repeating cancel or resolve after it took effect changes
nothing and says so (the Engine returns the job unchanged); requeue is refused
once the job is queued again, naming the state.
"""

from __future__ import annotations

from typing import Any

import click

from ..errors import BadInput
from ..inputs import seconds
from ..lifecycle.spec import lifecycle
from ..ports import Migratable, ScanRequest
from ..records import Job
from ..registry import open_store, store_url
from . import cli
from ._common import (
    actor_options,
    emit_json,
    engine_for,
    entry_dict,
    fmt_age,
    fmt_time,
    job_dict,
    json_option,
    parse_json,
    redact,
    store_option,
    table,
)

#: the most jobs a read command looks at (list --limit is capped here too)
SCAN_CAP = 10_000


def _job_line(job: Job) -> str:
    return f"job {job.id} ({job.kind}, queue {job.queue}): {job.state}"


@cli.command()
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
    "--retry-safe/--not-retry-safe",
    default=None,
    help="May a run lost to a crash run again? [default: the kind's policy where the "
    "submitter knows it; else not (a lost run goes to investigate)]. The worker running "
    "the kind enforces its handler's policy either way.",
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
    retry_safe: bool | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Submit one job of KIND."""
    value = parse_json(payload, "--payload")
    opts: dict[str, Any] = {
        "queue": queue,
        "priority": priority,
        "delay": delay,
        "idempotency_key": idempotency_key,
        "max_attempts": max_attempts,
        "timeout": timeout,
        "retry_safe": retry_safe,
    }
    with engine_for(store) as engine:
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


@cli.command()
@click.option(
    "--expiring-within",
    type=float,
    default=10.0,
    show_default=True,
    help="List leases that lapse within SECONDS.",
)
@store_option
@json_option
def status(expiring_within: float, store: str | None, as_json: bool) -> None:
    """Jobs per state per queue, the oldest queued job, leases about to lapse."""
    lc = lifecycle()
    with engine_for(store) as engine:
        now = engine.clock.now()
        counts = engine.counts()
        queued = engine.scan(ScanRequest(states=(lc.initial,), limit=SCAN_CAP))
        leased_states = tuple(s for (s, ev) in lc.table if ev == "heartbeat")
        expiring = engine.scan(
            ScanRequest(states=leased_states, lease_expired_at=now + expiring_within, limit=100)
        )
    oldest: dict[str, float] = {}
    for job in queued:
        oldest[job.queue] = min(oldest.get(job.queue, job.created_at), job.created_at)
    queues = sorted({q for q, _s in counts})
    if as_json:
        emit_json(
            {
                "counts": {q: {s: n for (qq, s), n in counts.items() if qq == q} for q in queues},
                "oldest_queued_age": {q: now - t for q, t in oldest.items()},
                "expiring_leases": [
                    {
                        "id": j.id,
                        "state": j.state,
                        "lease_until": j.lease_until,
                        "owner": None if j.owner is None else j.owner.to_dict(),
                    }
                    for j in expiring
                ],
            }
        )
        return
    if not queues:
        click.echo("no jobs")
        return
    states = [s for s in lc.states if any((q, s) in counts for q in queues)]
    rows = [
        [
            q,
            *(str(counts.get((q, s), 0)) for s in states),
            fmt_age(now - oldest[q]) if q in oldest else "-",
        ]
        for q in queues
    ]
    click.echo(table(rows, ["queue", *states, "oldest queued"]))
    if expiring:
        click.echo(f"\nleases lapsing within {expiring_within:g}s:")
        for j in expiring:
            left = (j.lease_until or now) - now
            click.echo(f"  {j.id} {j.state} owner {j.owner} lapses in {left:.1f}s")


@cli.command("list")
@click.option("--state", required=True, help="State to list (see `jobfsm diagram`).")
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--limit", type=click.IntRange(1, SCAN_CAP), default=50, show_default=True)
@store_option
@json_option
def list_jobs(
    *, state: str, queue: str | None, kind: str | None, limit: int, store: str | None, as_json: bool
) -> None:
    """List jobs in one state, oldest first."""
    lc = lifecycle()
    if state not in lc.states:
        raise BadInput(f"unknown state {state!r}; known: {', '.join(lc.states)}")
    with engine_for(store) as engine:
        jobs = engine.scan(
            ScanRequest(
                states=(state,),
                queues=None if queue is None else (queue,),
                kinds=None if kind is None else (kind,),
                limit=SCAN_CAP,
            )
        )
    jobs = sorted(jobs, key=lambda j: (j.created_at, j.id))[:limit]
    if as_json:
        emit_json([job_dict(j) for j in jobs])
        return
    rows = [
        [j.id, j.kind, j.queue, str(j.attempt), fmt_time(j.updated_at), (j.last_error or "")[:60]]
        for j in jobs
    ]
    click.echo(table(rows, ["id", "kind", "queue", "attempt", "updated", "last error"]))


@cli.command()
@click.argument("job_id", metavar="JOB")
@store_option
@json_option
def inspect(job_id: str, store: str | None, as_json: bool) -> None:
    """Show a job's record and its audit timeline."""
    with engine_for(store) as engine:
        job = engine.get(job_id)
        trail = engine.history(job_id)
    if as_json:
        emit_json({"job": job_dict(job), "history": [entry_dict(e) for e in trail]})
        return
    for key, value in job_dict(job).items():
        shown = value
        if key.endswith("_at") or key in ("run_after", "deadline", "lease_until"):
            shown = fmt_time(value) if value is not None else None
        click.echo(f"{key:>16}: {shown}")
    click.echo("\naudit trail:")
    rows = []
    for e in trail:
        rows.append(
            [
                str(e.version),
                fmt_time(e.at),
                e.event + ("" if e.outcome == "applied" else f" ({e.outcome})"),
                f"{e.from_state or '-'} -> {e.to_state}",
                str(e.fence),
                str(e.attempt),
                e.actor or "",
                e.reason or "",
                e.error or "",
            ]
        )
    click.echo(
        table(rows, ["v", "at", "event", "transition", "fence", "try", "actor", "reason", "error"])
    )


def _report(before: Job, after: Job, verb: str) -> None:
    if after.version == before.version:
        click.echo(f"job {after.id}: already {after.state}; nothing changed")
    else:
        click.echo(f"job {after.id}: {before.state} -> {after.state} ({verb})")


@cli.command()
@click.argument("job_id", metavar="JOB")
@actor_options
@store_option
def cancel(job_id: str, actor: str, reason: str, store: str | None) -> None:
    """Cancel a job. A running job goes to cancelling until its handler stops.

    Repeating it once the cancel took effect changes nothing.
    """
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.cancel(job_id, actor=actor, reason=reason)
    _report(before, after, "cancel")


@cli.command()
@click.argument("job_id", metavar="JOB")
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    required=True,
    help="Fresh attempt budget: the job may run this many more times (required).",
)
@actor_options
@store_option
def requeue(job_id: str, attempts: int, actor: str, reason: str, store: str | None) -> None:
    """Send a failed, cancelled or parked job back to the queue."""
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.requeue(job_id, actor=actor, reason=reason, attempts=attempts)
    _report(before, after, f"requeue with {attempts} fresh attempt(s)")


@cli.command()
@click.argument("job_id", metavar="JOB")
@click.option(
    "--outcome", type=click.Choice(["succeeded", "failed"]), required=True, help="How it ended."
)
@click.option("--result", default=None, help="JSON result to store when it succeeded.")
@actor_options
@store_option
def resolve(
    *, job_id: str, outcome: str, result: str | None, actor: str, reason: str, store: str | None
) -> None:
    """Settle a job parked in investigate as succeeded or failed.

    Repeating it with the same outcome changes nothing.
    """
    value = None if result is None else parse_json(result, "--result")
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.resolve(job_id, outcome=outcome, actor=actor, reason=reason, result=value)
    _report(before, after, "resolve")


@cli.command()
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
@store_option
def prune(batch: int, max_batches: int, store: str | None) -> None:
    """Delete finished jobs past their retention (succeeded and cancelled: 7 days).

    Failed jobs and jobs in investigate are kept until an operator handles them.
    """
    with engine_for(store) as engine:
        n = engine.prune(limit=batch, max_batches=max_batches)
    click.echo(f"pruned {n} job(s)")


@cli.command()
@click.argument("url", required=False)
def migrate(url: str | None) -> None:
    """Create or upgrade the store's schema (URL default: --store rules).

    Stores without a schema (memory://) have nothing to do.
    """
    target = store_url(url)
    store = open_store(target)
    try:
        if not isinstance(store, Migratable):
            click.echo(f"{redact(target)}: nothing to migrate")
            return
        applied = store.migrate()
    finally:
        store.close()
    if applied:
        versions = ", ".join(str(v) for v in applied)
        click.echo(f"{redact(target)}: applied schema migration(s) {versions}")
    else:
        click.echo(f"{redact(target)}: schema already up to date")
