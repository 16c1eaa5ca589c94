"""The store's reads and writes as plans (`adapters.postgres.plan`), each written once
and driven by both stores: `PostgresStore` (blocking) and `AsyncPostgresStore`.

Most writes are one statement in autocommit mode: compare-and-set on `version` plus
the audit entries, in data-modifying CTEs. Insert is in `inserts`, the insert inside
a caller's transaction in `txn`; claim, being the blocking worker's alone and its
hottest path, stays in `store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters._rows import check_storable, first_rejections, job_from_values, owner_to_text
from fsm.errors import BadInput, TransientStoreError, VersionConflict
from fsm.lifecycle.core import erased_data_json
from fsm.ports import ProgressRequest, RenewRequest, ScanRequest
from fsm.records import AuditEntry, Decision, Job

from .params import apply_params, apply_statement, audit_arrays, entry_of, scan_statement
from .plan import (
    BEGIN,
    Plan,
    Run,
    RunMany,
    Target,
    confirm,
    ids,
    not_applied,
    transaction,
    write,
)

# --- reads ---------------------------------------------------------------------------


def get(t: Target, job_id: str) -> Plan[Job | None]:
    rows = yield Run(t.sql.get, (job_id,))
    return job_from_values(rows[0]) if rows else None


def history(t: Target, job_id: str) -> Plan[list[AuditEntry]]:
    rows = yield Run(t.sql.history, (job_id,))
    return [entry_of(r) for r in rows]


def counts(t: Target) -> Plan[dict[tuple[str, str], int]]:
    rows = yield Run(t.sql.counts)
    return {(q, s): int(n) for q, s, n in rows}


def scan(t: Target, request: ScanRequest) -> Plan[list[Job]]:
    if not request.states or request.limit < 1:
        return []
    rows = yield Run(*scan_statement(t.sql, request))
    return [job_from_values(r) for r in rows]


# --- apply and erase -----------------------------------------------------------------


def check_apply(decisions: Sequence[Decision]) -> bool:
    """Refuse what `apply` cannot take (a decision without the record it was made on,
    a value the store cannot hold), before any write. True when one job has several
    decisions: they go one after another."""
    for d in decisions:
        if d.previous is None:
            raise BadInput(f"job {d.job.id}: apply needs a decision on an existing job")
    check_storable((d.job for d in decisions), (d.entry for d in decisions))
    job_ids = [d.job.id for d in decisions]
    return len(set(job_ids)) != len(job_ids)


def apply(t: Target, decisions: Sequence[Decision]) -> Plan[list[Job | VersionConflict]]:
    """`Store.apply`: compare-and-set on each version, with the audit entries, in one
    statement; several decisions for one job, one after another in one transaction."""
    if not decisions:
        return []
    if check_apply(decisions):
        return (yield from _apply_in_order(t, decisions))
    body = ids(Run(*apply_statement(t.sql, decisions)))
    what = f"apply of {len(decisions)} decisions"
    written = yield from write(t, "apply", body, lambda: confirm(t, decisions, what))
    return (yield from outcomes(t, decisions, written))


def outcomes(
    t: Target, decisions: Sequence[Decision], written: set[str]
) -> Plan[list[Job | VersionConflict]]:
    """Each decision's job if `written`, else its VersionConflict (naming the version
    stored now)."""
    lost = [d.job.id for d in decisions if d.job.id not in written]
    current: dict[str, int] = {}
    if lost:
        current = dict((yield Run(t.sql.versions, (lost,))))
    out: list[Job | VersionConflict] = []
    for d in decisions:
        if d.job.id in written:
            out.append(d.job)
        else:
            assert d.previous is not None
            out.append(VersionConflict(d.job.id, d.previous.version, current.get(d.job.id)))
    return out


def _apply_in_order(t: Target, decisions: Sequence[Decision]) -> Plan[list[Job | VersionConflict]]:
    out: list[Job | VersionConflict] = []
    applied: list[Decision] = []

    def body() -> Plan[None]:
        yield BEGIN
        for d in decisions:
            if (yield Run(t.sql.apply, apply_params([d]))):
                out.append(d.job)
                applied.append(d)
            else:
                (written,) = yield from outcomes(t, [d], set())
                out.append(written)

    def confirm_applied() -> Plan[None]:
        if applied or len(out) < len(decisions):  # else all were conflicts: nothing to commit
            yield from confirm(t, applied, f"apply of {len(decisions)} decisions")

    yield from write(t, "apply", transaction(body()), confirm_applied)
    return out


def erase(t: Target, decision: Decision) -> Plan[Job | VersionConflict]:
    """`Erasable.erase`: the apply and the rewrite of the trail in one transaction."""
    if decision.previous is None:
        raise BadInput(f"job {decision.job.id}: erase needs a decision on an existing job")
    check_storable([decision.job], [decision.entry])
    job_id = decision.job.id

    def body() -> Plan[set[str]]:
        yield BEGIN
        written = yield from ids(Run(*apply_statement(t.sql, [decision])))
        if job_id in written:
            rows = yield Run(t.sql.trail_data, (job_id,))
            erased = [(erased_data_json(text), job_id, seq) for seq, text in rows]
            yield RunMany(t.sql.erase_entry, erased)
        return written

    written = yield from write(
        t, "erase", transaction(body()), lambda: confirm(t, [decision], "erase")
    )
    (outcome,) = yield from outcomes(t, [decision], written)
    return outcome


# --- audit entries that change no job ------------------------------------------------


def record(t: Target, entries: Sequence[AuditEntry]) -> Plan[None]:
    """`Store.record`; a repeated rejected report is recorded once."""
    check_storable((), entries)
    entries = first_rejections(entries)
    if not entries:
        return
    body = _none(Run(t.sql.record, audit_arrays(entries), fetch=False))
    yield from write(t, "record", body, lambda: _recorded(t, entries))


def _none(run: Run) -> Plan[None]:
    yield run


def _recorded(t: Target, entries: Sequence[AuditEntry]) -> Plan[None]:
    for e in entries:
        found = yield Run(
            t.sql.has_entry, (e.job_id, e.version, e.at, e.event, e.fence, e.data_json)
        )
        if found and found[0][0] > 0:
            return
    raise not_applied(t, f"recording {len(entries)} audit entries")


# --- the blocking worker's writes (the async store has no worker) -----------------


def renew(t: Target, request: RenewRequest) -> Plan[dict[str, str]]:
    """`Store.renew`: every fenced lease of one owner extended, in one statement."""
    if not request.fences or not request.states:
        return {}
    job_ids = list(request.fences)
    params = [
        request.lease_until,
        request.now,
        job_ids,
        [request.fences[i] for i in job_ids],
        owner_to_text(request.owner),
        list(request.states),
    ]

    def body() -> Plan[dict[str, str]]:
        return {r[0]: r[1] for r in (yield Run(t.sql.renew, params))}

    def renewed() -> Plan[dict[str, str]]:
        rows = yield Run(t.sql.get_many, (job_ids,))
        out = {
            j.id: j.state
            for j in map(job_from_values, rows)
            if j.owner == request.owner
            and j.fence == request.fences[j.id]
            and j.lease_until == request.lease_until
            and j.updated_at == request.now
        }
        if not out:
            raise not_applied(t, f"renew of {len(job_ids)} leases")
        return out

    return (yield from write(t, "renew", body(), renewed))


def save_progress(t: Target, request: ProgressRequest) -> Plan[list[str]]:
    """`StoresProgress.save_progress`: fenced like renew, no version bump, no audit."""
    if not request.items or not request.states:
        return []
    job_ids = list(request.items)
    params = [
        job_ids,
        [request.items[i][0] for i in job_ids],
        [request.items[i][1] for i in job_ids],
        owner_to_text(request.owner),
        list(request.states),
    ]

    def body() -> Plan[list[str]]:
        return [r[0] for r in (yield Run(t.sql.save_progress, params))]

    def saved() -> Plan[list[str]]:
        rows = yield Run(t.sql.get_many, (job_ids,))
        jobs = map(job_from_values, rows)
        return [j.id for j in jobs if j.progress_json == request.items[j.id][1]]

    return (yield from write(t, "save_progress", body(), saved))


#: what one prune batch deleted, (queue, state) -> jobs, and the seq of its last job (0: none)
Pruned = tuple[dict[tuple[str, str], int], int]


def prune(t: Target, statement: str, params: Sequence[Any]) -> Plan[Pruned]:
    """One prune batch: (queue, state) -> jobs deleted, and the seq of the last (0: none)."""

    def body() -> Plan[Pruned]:
        rows = yield Run(statement, params)
        deleted = {(r[0], r[1]): int(r[2]) for r in rows or () if r[2]}
        return deleted, max((int(r[3]) for r in rows or () if r[2]), default=0)

    def unknown() -> Plan[Pruned]:
        yield from ()
        raise TransientStoreError(
            "prune: the connection was lost while it ran; how many jobs it removed is "
            "unknown. Prune again (it only removes what is past retention)."
        )

    return (yield from write(t, "prune", body(), unknown))
