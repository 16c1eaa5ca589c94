"""Operator actions: cancel, requeue, resolve, pause, resume, erase.

Each needs --actor and --reason, both written to the audit trail. Repeating cancel or
resolve after it took effect changes nothing and says so (the Engine returns the job
unchanged); requeue is refused once the job is queued again, naming the state. cancel
and requeue also act on the jobs a filter selects (--state, with --queue and --kind), at
most --limit of them, and --dry-run lists them without acting.
"""

from __future__ import annotations

from typing import Any

import click

from ..display.terminal import print_table
from ..errors import JobFSMError
from ..jsonio import decode
from ..records import Job
from ..text import first_line
from .connect import engine_for
from .options import actor_options, store_option
from .selection import JOB_HEADER, SCAN_CAP, filter_options, job_rows, select_jobs


def _report(before: Job, after: Job, verb: str) -> None:
    if after.version == before.version:
        click.echo(f"job {after.id}: already {after.state}; nothing changed")
    else:
        click.echo(f"job {after.id}: {before.state} -> {after.state} ({verb})")


def _bulk(
    what: str,
    jobs: list[Job],
    act: Any,
    *,
    store: str | None,
    dry_run: bool,
    limit: int,
) -> None:
    """Apply `act(engine, job)` to each selected job; one refused job does not stop the rest."""
    if not jobs:
        click.echo(f"no jobs match: nothing to {what}")
        return
    if dry_run:
        print_table(job_rows(jobs), JOB_HEADER)
        click.echo(f"dry run: would {what} {len(jobs)} job(s) (at most --limit {limit})")
        return
    done = refused = 0
    with engine_for(store, existing=True) as engine:
        for job in jobs:
            try:
                after = act(engine, job)
            except JobFSMError as err:
                refused += 1
                click.echo(f"job {job.id}: not changed: {first_line(str(err), 200)}")
                continue
            done += 1
            _report(job, after, what)
    click.echo(f"{what}: {done} changed, {refused} refused, of {len(jobs)} selected")
    if refused:
        raise SystemExit(1)


def _bulk_options(func: Any) -> Any:
    func = click.option(
        "--dry-run", is_flag=True, help="With a filter: list the jobs it selects, change nothing."
    )(func)
    func = click.option(
        "--limit",
        type=click.IntRange(1, SCAN_CAP),
        default=100,
        show_default=True,
        help="With a filter: act on at most this many jobs (oldest first).",
    )(func)
    return filter_options(func)


def _one_or_filter(job_id: str | None, state: tuple[str, ...], queue: Any, kind: Any) -> None:
    if job_id is not None and (state or queue or kind):
        raise click.UsageError("give a JOB id or a filter (--state/--queue/--kind), not both")
    if job_id is None and not state:
        raise click.UsageError(
            "give a JOB id, or --state (with --queue/--kind) to act on every job it selects"
        )


@click.command()
@click.argument("job_id", metavar="[JOB]", required=False)
@_bulk_options
@actor_options
@store_option
def cancel(
    *,
    job_id: str | None,
    state: tuple[str, ...],
    queue: tuple[str, ...],
    kind: tuple[str, ...],
    limit: int,
    dry_run: bool,
    actor: str,
    reason: str,
    store: str | None,
) -> None:
    """Cancel a job, or the jobs a filter selects. A running job goes to cancelling until
    its handler stops.

    Repeating it once the cancel took effect changes nothing. With a filter, jobs it
    cannot cancel (finished ones) are named and the command exits 1.
    """
    _one_or_filter(job_id, state, queue, kind)
    if job_id is None:
        jobs = select_jobs(store, state, queue, kind, limit)
        _bulk(
            "cancel",
            jobs,
            lambda engine, job: engine.cancel(job.id, actor=actor, reason=reason),
            store=store,
            dry_run=dry_run,
            limit=limit,
        )
        return
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.cancel(job_id, actor=actor, reason=reason)
    _report(before, after, "cancel")


@click.command()
@click.argument("job_id", metavar="[JOB]", required=False)
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    required=True,
    help="Fresh attempt budget: the job may run this many more times (required).",
)
@_bulk_options
@actor_options
@store_option
def requeue(
    *,
    job_id: str | None,
    attempts: int,
    state: tuple[str, ...],
    queue: tuple[str, ...],
    kind: tuple[str, ...],
    limit: int,
    dry_run: bool,
    actor: str,
    reason: str,
    store: str | None,
) -> None:
    """Send a failed, cancelled or parked job back to the queue, or every job a filter
    selects (e.g. `--state failed --queue mail`)."""
    _one_or_filter(job_id, state, queue, kind)
    verb = f"requeue with {attempts} fresh attempt(s)"
    if job_id is None:
        jobs = select_jobs(store, state, queue, kind, limit)
        _bulk(
            "requeue",
            jobs,
            lambda engine, job: engine.requeue(
                job.id, actor=actor, reason=reason, attempts=attempts
            ),
            store=store,
            dry_run=dry_run,
            limit=limit,
        )
        return
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.requeue(job_id, actor=actor, reason=reason, attempts=attempts)
    _report(before, after, verb)


@click.command()
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
    value = None if result is None else decode(result, what="--result")
    with engine_for(store) as engine:
        before = engine.get(job_id)
        after = engine.resolve(job_id, outcome=outcome, actor=actor, reason=reason, result=value)
    _report(before, after, "resolve")


@click.command()
@click.argument("queue")
@actor_options
@store_option
def pause(*, queue: str, actor: str, reason: str, store: str | None) -> None:
    """Stop every worker from leasing jobs of QUEUE until `jobfsm resume`.

    Workers see it within a second; running jobs finish; submits are still taken.
    """
    with engine_for(store, existing=True) as engine:
        engine.pause(queue, actor=actor, reason=reason)
    click.echo(f"queue {queue} paused: workers lease none of its jobs until it is resumed")


@click.command()
@click.argument("queue")
@actor_options
@store_option
def resume(*, queue: str, actor: str, reason: str, store: str | None) -> None:
    """Let workers lease jobs of a paused QUEUE again."""
    with engine_for(store, existing=True) as engine:
        was = engine.resume(queue, actor=actor, reason=reason)
    click.echo(f"queue {queue} resumed" if was else f"queue {queue} was not paused")


@click.command()
@click.argument("job_id", metavar="JOB")
@actor_options
@store_option
def erase(*, job_id: str, actor: str, reason: str, store: str | None) -> None:
    """Erase a finished job's payload and result, from its record and its whole audit trail.

    The job keeps its state, its history of transitions and their errors; only the data
    it carried is blanked. The erase is audited with actor and reason.
    """
    with engine_for(store) as engine:
        engine.erase(job_id, actor=actor, reason=reason)
    click.echo(f"job {job_id}: payload and result erased from the record and the audit trail")
