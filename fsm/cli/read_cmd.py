"""Read-only commands: status, list, inspect (show, history).

They open existing stores only (`connect.engine_for(..., existing=True)`). Stored text is
printed through `fsm.text.printable`: it can never drive the terminal.
"""

from __future__ import annotations

import click

from ..display.format import (
    as_json_text,
    error_stage,
    error_summary,
    fmt_age,
    fmt_time,
    short_owners,
)
from ..display.terminal import print_table
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest, ServiceLease
from ..records import AuditEntry, Job
from ..service import dependencies
from ..service.maintenance import retention
from ..text import first_line, printable
from .connect import engine_for
from .options import Seconds, json_option, store_option
from .output import emit_json, entry_dict, job_dict
from .selection import JOB_HEADER, SCAN_CAP, filter_options, job_rows, select_jobs


@click.command()
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
    """Jobs per state per queue, the oldest queued job, leases about to lapse, and
    which worker runs automatic retention (holds the store's `retention` lease)."""
    lc = lifecycle()
    with engine_for(store, existing=True) as engine:
        now = engine.clock.now()
        counts = engine.counts()
        queued = engine.scan(ScanRequest(states=(lc.initial,), limit=SCAN_CAP))
        leased_states = lc.sources("heartbeat")
        expiring = engine.scan(
            ScanRequest(states=leased_states, lease_expired_at=now + expiring_within, limit=100)
        )
        paused = engine.paused()
        limits = engine.limits()
        lease = retention.recorded_lease(engine.store)
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
                "limits": {
                    s.limit.key: {
                        "concurrency": s.limit.concurrency,
                        "rate": s.limit.rate,
                        "period": s.limit.period,
                        "holding": s.holding,
                        "waiting": s.waiting,
                    }
                    for s in limits
                },
                "retention_lease": None
                if lease is None
                else {"owner": lease.owner, "until": lease.until, "held": lease.until > now},
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
            f"queue {printable(q)} paused {fmt_age(now - p.at)} ago by {printable(p.actor)}: "
            f"{printable(p.reason)}"
        )
    for lim in limits:
        click.echo(
            f"limit {printable(lim.limit.key)}: {lim.limit.describe()}; "
            f"{lim.holding} holding a slot, {lim.waiting} waiting"
        )
    if queues:
        _print_counts(counts, queues, oldest, now)
    else:
        click.echo("no jobs")
    if expiring:
        click.echo(f"\nleases lapsing within {expiring_within:g}s:")
        for j in expiring:
            left = (j.lease_until or now) - now
            owner = short_owners(printable(j.owner))
            click.echo(f"  {j.id} {j.state} owner {owner} lapses in {left:.1f}s")
        click.echo()
    click.echo(_retention_line(lease, now))


def _print_counts(
    counts: dict[tuple[str, str], int], queues: list[str], oldest: dict[str, float], now: float
) -> None:
    states = [s for s in lifecycle().states if any((q, s) in counts for q in queues)]
    rows = [
        [
            q,
            *(str(counts.get((q, s), 0)) for s in states),
            fmt_age(now - oldest[q]) if q in oldest else "-",
        ]
        for q in queues
    ]
    print_table(rows, ["queue", *states, "oldest queued"])


def _retention_line(lease: ServiceLease | None, now: float) -> str:
    """Who runs automatic retention (docs/retention.md): the live holder of the store's
    `retention` lease until when, or none (with the last holder if its lease ran out)."""
    if lease is None:
        return "retention lease: none"
    owner = printable(lease.owner)
    if lease.until > now:
        return (
            f"retention lease: held by {owner} until {fmt_time(lease.until)} "
            f"(in {fmt_age(lease.until - now)})"
        )
    return (
        f"retention lease: none (the last holder, {owner}, lost it at "
        f"{fmt_time(lease.until)}, {fmt_age(now - lease.until)} ago)"
    )


@click.command("list")
@filter_options
@click.option("--limit", type=click.IntRange(1, SCAN_CAP), default=50, show_default=True)
@click.option(
    "--newest-first/--oldest-first",
    default=True,
    show_default=True,
    help="Order by submit time: newest first (as the dashboard lists), or oldest first.",
)
@store_option
@json_option
def list_jobs(
    *,
    state: tuple[str, ...],
    queue: tuple[str, ...],
    kind: tuple[str, ...],
    limit: int,
    newest_first: bool,
    store: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first: every state, or only those given with --state.

    --state, --queue and --kind are repeatable: a job is listed when it matches one
    value of each option given. The error column shows an error's first line with the
    words that say what happened first (a judged owner's id is shortened and put last).
    """
    jobs = select_jobs(store, state, queue, kind, limit, newest_first=newest_first)
    if as_json:
        emit_json([job_dict(j) for j in jobs])
        return
    if not jobs:
        click.echo("no jobs match")
        return
    print_table(job_rows(jobs), JOB_HEADER)


_TIME_FIELDS = ("run_after", "deadline", "lease_until")
#: the columns of `inspect`'s audit trail (reason and error share one: often one text)
AUDIT_HEADER = ["v", "at", "event", "transition", "fence", "try", "code", "stage", "actor"]
AUDIT_HEADER.append("reason / error")


def _inspect(job_id: str, store: str | None, as_json: bool) -> None:
    with engine_for(store, existing=True) as engine:
        job = engine.get(job_id)
        trail = engine.history(job_id)
        after = dependencies.prerequisites_of(engine.kernel, job_id)
        dependents = dependencies.dependents_of(engine.kernel, job_id)
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
            shown = "-" if job.owner is None else short_owners(printable(job.owner))
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
            shown = printable(value)
        click.echo(f"{key:>16}: {shown}")
    if job.last_error:
        stage = error_stage(job.last_error, trail)
        where = f" ({stage})" if stage else ""
        click.echo(f"{'last_error':>16}: {first_line(job.last_error, 200)}{where}")
        if "\n" in job.last_error.strip():
            click.echo("\nlast error in full:")
            click.echo(printable(job.last_error.rstrip(), keep="\n"))
        traced = [e for e in trail if e.data.get("traceback")]
        if traced:  # an unexpected error's traceback, kept in its audit entry
            click.echo(f"\ntraceback of the last failure (attempt {traced[-1].attempt}):")
            click.echo(printable(str(traced[-1].data["traceback"]).rstrip(), keep="\n"))
    _print_dependencies(after, dependents)
    rows = [
        [
            str(e.version),
            fmt_time(e.at),
            e.event + ("" if e.outcome == "applied" else f" ({e.outcome})"),
            f"{e.from_state or '-'} -> {e.to_state}",
            str(e.fence),
            str(e.attempt),
            e.code or "-",
            e.stage or "",
            e.actor or "",
            _why(e),
        ]
        for e in trail
    ]
    click.echo("")
    print_table(
        rows,
        AUDIT_HEADER,
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


def _why(entry: AuditEntry) -> str:
    """An entry's reason and error as one cell: a text both hold (a recovery's verdict is
    its reason and its error) once, what happened first (`error_summary`)."""
    reason = entry.reason or _mark_text(entry) or ""
    error = entry.error or ""
    if not error or error in reason:
        return error_summary(reason, 200)
    if not reason or reason in error:
        return error_summary(error, 200)
    return f"{error_summary(reason, 200)}; {error_summary(error, 200)}"


def _mark_text(entry: AuditEntry) -> str | None:
    """A mark's label and external id, as `jobfsm inspect` shows them."""
    if entry.event != "mark":
        return None
    label = printable(str(entry.data.get("label", "")))
    external = entry.data.get("external_id")
    return label if external is None else f"{label} [{printable(str(external))}]"


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


def _inspect_command(name: str, summary: str) -> click.Command:
    @click.command(name, help=summary)
    @click.argument("job_id", metavar="JOB")
    @store_option
    @json_option
    def command(job_id: str, store: str | None, as_json: bool) -> None:
        _inspect(job_id, store, as_json)

    return command


inspect = _inspect_command(
    "inspect",
    "Show a job's record (payload and result as JSON) and its audit timeline.\n\n"
    "`show` and `history` are the same command.",
)
show = _inspect_command("show", "Same as `inspect`: a job's record and its audit timeline.")
history = _inspect_command("history", "Same as `inspect`: a job's record and its audit timeline.")
