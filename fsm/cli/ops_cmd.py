"""Operator and service commands: submit, status, list, inspect (show, history), cancel,
requeue, resolve, prune, migrate.

Operator actions (cancel, requeue, resolve) need --actor and --reason, both written
to the job's audit trail. Repeating cancel or resolve after it took effect changes
nothing and says so (the Engine returns the job unchanged); requeue is refused
once the job is queued again, naming the state. cancel and requeue also act on the
jobs a filter selects (--state, with --queue and --kind), at most --limit of them,
and --dry-run lists them without acting.

Read-only commands (status, list, inspect, diagram --job) open existing stores only.
Stored text is printed through `_common.clean`: it can never drive the terminal.
"""

from __future__ import annotations

from typing import Any

import click

from .. import dependencies
from ..errors import BadInput, JobFSMError
from ..inputs import check_name, seconds
from ..lifecycle.spec import lifecycle
from ..ports import Migratable, ScanRequest
from ..records import AuditEntry, Job
from ..registry import open_store, store_url
from . import cli
from ._common import (
    Seconds,
    actor_options,
    as_json_text,
    clean,
    emit_json,
    engine_for,
    entry_dict,
    first_line,
    fmt_age,
    fmt_time,
    job_dict,
    json_option,
    parse_json,
    print_table,
    redact,
    short_owners,
    store_option,
)

#: the most jobs a read command looks at (list --limit is capped here too)
SCAN_CAP = 10_000


def _job_line(job: Job) -> str:
    return clean(f"job {job.id} ({job.kind}, queue {job.queue}): {job.state}")


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
        "after": list(after) or None,
        "on_failed_dependency": on_failed_dependency,
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
    type=Seconds(zero_ok=True),
    default=10.0,
    show_default=True,
    help="List leases that lapse within SECONDS.",
)
@store_option
@json_option
def status(expiring_within: float, store: str | None, as_json: bool) -> None:
    """Jobs per state per queue, the oldest queued job, leases about to lapse."""
    lc = lifecycle()
    with engine_for(store, existing=True) as engine:
        now = engine.clock.now()
        counts = engine.counts()
        queued = engine.scan(ScanRequest(states=(lc.initial,), limit=SCAN_CAP))
        leased_states = tuple(s for (s, ev) in lc.table if ev == "heartbeat")
        expiring = engine.scan(
            ScanRequest(states=leased_states, lease_expired_at=now + expiring_within, limit=100)
        )
        paused = engine.paused()
    oldest: dict[str, float] = {}
    for job in queued:
        oldest[job.queue] = min(oldest.get(job.queue, job.created_at), job.created_at)
    queues = sorted({q for q, _s in counts})
    if as_json:
        emit_json(
            {
                "counts": {q: {s: n for (qq, s), n in counts.items() if qq == q} for q in queues},
                "oldest_queued_age": {q: now - t for q, t in oldest.items()},
                "paused": {
                    q: {"actor": p.actor, "reason": p.reason, "at": p.at} for q, p in paused.items()
                },
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
    for q, p in sorted(paused.items()):
        click.echo(
            f"queue {clean(q)} paused {fmt_age(now - p.at)} ago by {clean(p.actor)}: "
            f"{clean(p.reason)}"
        )
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
    print_table(rows, ["queue", *states, "oldest queued"])
    if expiring:
        click.echo(f"\nleases lapsing within {expiring_within:g}s:")
        for j in expiring:
            left = (j.lease_until or now) - now
            owner = short_owners(clean(j.owner))
            click.echo(f"  {j.id} {j.state} owner {owner} lapses in {left:.1f}s")


def _states(state: tuple[str, ...]) -> tuple[str, ...]:
    """The --state values checked against the lifecycle; none given means every state."""
    lc = lifecycle()
    for s in state:
        if s not in lc.states:
            raise BadInput(f"unknown state {s!r}; known: {', '.join(lc.states)}")
    return tuple(dict.fromkeys(state)) or tuple(lc.states)


def _filter_options(func: Any) -> Any:
    func = click.option("--kind", default=None, help="Only this kind.")(func)
    func = click.option("--queue", default=None, help="Only this queue.")(func)
    return click.option(
        "--state",
        "state",
        multiple=True,
        help="Only jobs in this state (repeatable; see `jobfsm diagram`).",
    )(func)


def _select(
    store: str | None, state: tuple[str, ...], queue: str | None, kind: str | None, limit: int
) -> list[Job]:
    """The jobs a filter selects, oldest first, at most `limit` (the scan is capped)."""
    states = _states(state)
    with engine_for(store, existing=True) as engine:
        jobs = engine.scan(
            ScanRequest(
                states=states,
                queues=None if queue is None else (queue,),
                kinds=None if kind is None else (kind,),
                limit=SCAN_CAP,
            )
        )
    return sorted(jobs, key=lambda j: (j.created_at, j.id))[:limit]


def _job_rows(jobs: list[Job]) -> list[list[str]]:
    return [
        [
            j.id,
            j.state,
            j.kind,
            j.queue,
            str(j.attempt),
            fmt_time(j.updated_at),
            first_line(j.last_error, 60),
        ]
        for j in jobs
    ]


JOB_HEADER = ["id", "state", "kind", "queue", "attempt", "updated", "last error (first line)"]


@cli.command("list")
@_filter_options
@click.option("--limit", type=click.IntRange(1, SCAN_CAP), default=50, show_default=True)
@store_option
@json_option
def list_jobs(
    *,
    state: tuple[str, ...],
    queue: str | None,
    kind: str | None,
    limit: int,
    store: str | None,
    as_json: bool,
) -> None:
    """List jobs, oldest first: every state, or only those given with --state."""
    jobs = _select(store, state, queue, kind, limit)
    if as_json:
        emit_json([job_dict(j) for j in jobs])
        return
    if not jobs:
        click.echo("no jobs match")
        return
    print_table(_job_rows(jobs), JOB_HEADER)


_TIME_FIELDS = ("run_after", "deadline", "lease_until")


def _inspect(job_id: str, store: str | None, as_json: bool) -> None:
    with engine_for(store, existing=True) as engine:
        job = engine.get(job_id)
        trail = engine.history(job_id)
        after = dependencies.prerequisites_of(engine, job_id)
        dependents = dependencies.dependents_of(engine, job_id)
    if as_json:
        emit_json(
            {
                "job": job_dict(job),
                "history": [entry_dict(e) for e in trail],
                "prerequisites": after,
                "dependents": {d.id: d.state for d in dependents},
            }
        )
        return
    for key, value in job_dict(job).items():
        if key in ("payload", "result"):
            shown = as_json_text(value)
        elif key.endswith("_at") or key in _TIME_FIELDS:
            shown = fmt_time(value)
        elif key == "owner":
            shown = "-" if job.owner is None else short_owners(clean(job.owner))
        elif key == "progress" and value is not None:
            when = f"attempt {value['attempt']}, {fmt_time(value['at'])}"
            shown = f"{as_json_text(value['value'])} ({when})"
        elif key == "last_error":
            continue  # printed whole, below
        elif value is None:
            shown = "-"
        elif isinstance(value, bool):
            shown = "true" if value else "false"
        else:
            shown = clean(value)
        click.echo(f"{key:>16}: {shown}")
    if job.last_error:
        click.echo(f"{'last_error':>16}: {first_line(job.last_error, 200)}")
        if "\n" in job.last_error.strip():
            click.echo("\nlast error in full:")
            click.echo(clean(job.last_error.rstrip(), keep="\n"))
        traced = [e for e in trail if e.data.get("traceback")]
        if traced:  # an unexpected error's traceback, kept in its audit entry
            click.echo(f"\ntraceback of the last failure (attempt {traced[-1].attempt}):")
            click.echo(clean(str(traced[-1].data["traceback"]).rstrip(), keep="\n"))
    _print_dependencies(after, dependents)
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
                e.code or "-",
                e.actor or "",
                first_line(e.reason or _mark_text(e), 40),
                first_line(e.error, 60),
            ]
        )
    click.echo("")
    print_table(
        rows,
        ["v", "at", "event", "transition", "fence", "try", "code", "actor", "reason", "error"],
        title="audit trail",
    )
    marks = [e for e in trail if e.event == "mark" and e.outcome == "applied"]
    if marks:
        click.echo("")
        print_table(
            [[str(e.attempt), str(e.fence), fmt_time(e.at), _mark_text(e)] for e in marks],
            ["try", "fence", "at", "mark (label [external id])"],
            title="run marks",
        )


def _mark_text(entry: AuditEntry) -> str | None:
    """A mark's label and external id, as `jobfsm inspect` shows them."""
    if entry.event != "mark":
        return None
    label = clean(str(entry.data.get("label", "")))
    external = entry.data.get("external_id")
    return label if external is None else f"{label} [{clean(str(external))}]"


def _print_dependencies(after: dict[str, str | None], dependents: list[Job]) -> None:
    """A job's prerequisites (`after=`) and the jobs that wait for it, with their states."""
    if after:
        click.echo("")
        print_table(
            [[pid, state or "(pruned)"] for pid, state in sorted(after.items())],
            ["job", "state"],
            title="prerequisites (after)",
        )
    if dependents:
        shown = dependencies.SHOWN_DEPENDENTS
        more = f" (first {shown})" if len(dependents) >= shown else ""
        click.echo("")
        print_table(
            [[d.id, d.kind, d.state] for d in dependents],
            ["job", "kind", "state"],
            title=f"dependents{more}",
        )


def _inspect_command(name: str, summary: str) -> None:
    @cli.command(name, help=summary)
    @click.argument("job_id", metavar="JOB")
    @store_option
    @json_option
    def command(job_id: str, store: str | None, as_json: bool) -> None:
        _inspect(job_id, store, as_json)


_inspect_command(
    "inspect",
    "Show a job's record (payload and result as JSON) and its audit timeline.\n\n"
    "`show` and `history` are the same command.",
)
_inspect_command("show", "Same as `inspect`: a job's record and its audit timeline.")
_inspect_command("history", "Same as `inspect`: a job's record and its audit timeline.")


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
        print_table(_job_rows(jobs), JOB_HEADER)
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
    return _filter_options(func)


def _one_or_filter(job_id: str | None, state: tuple[str, ...], queue: Any, kind: Any) -> None:
    if job_id is not None and (state or queue or kind):
        raise click.UsageError("give a JOB id or a filter (--state/--queue/--kind), not both")
    if job_id is None and not state:
        raise click.UsageError(
            "give a JOB id, or --state (with --queue/--kind) to act on every job it selects"
        )


@cli.command()
@click.argument("job_id", metavar="[JOB]", required=False)
@_bulk_options
@actor_options
@store_option
def cancel(
    *,
    job_id: str | None,
    state: tuple[str, ...],
    queue: str | None,
    kind: str | None,
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
        jobs = _select(store, state, queue, kind, limit)
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


@cli.command()
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
    queue: str | None,
    kind: str | None,
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
        jobs = _select(store, state, queue, kind, limit)
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


@cli.command()
@click.argument("queue")
@actor_options
@store_option
def resume(*, queue: str, actor: str, reason: str, store: str | None) -> None:
    """Let workers lease jobs of a paused QUEUE again."""
    with engine_for(store, existing=True) as engine:
        was = engine.resume(queue, actor=actor, reason=reason)
    click.echo(f"queue {queue} resumed" if was else f"queue {queue} was not paused")


@cli.command()
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


@cli.command()
@click.argument("url", required=False)
def migrate(url: str | None) -> None:
    """Create or upgrade the store's schema (URL default: --store rules).

    Stores without a schema (memory://) have nothing to do.
    """
    target = store_url(url)
    store = open_store(target)  # opening applies what is missing (unless ?migrate=false)
    try:
        if not isinstance(store, Migratable):
            click.echo(f"{redact(target)}: nothing to migrate")
            return
        applied = store.migrate()
        version = store.schema_version()
    finally:
        store.close()
    at = "" if version is None else f" at version {version}"
    if applied:
        versions = ", ".join(str(v) for v in applied)
        click.echo(f"{redact(target)}: applied schema migration(s) {versions}; schema{at}")
    else:
        click.echo(f"{redact(target)}: schema{at}, up to date")
