"""The parameters of the store's statements, and its rows read back: `unnest` arrays,
batch rows, the apply statement that sets only the changed columns, the scan."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from typing import Any

from adapters._rows import AUDIT_COLUMNS, JOB_COLUMNS, audit_from_row, owner_to_text
from fsm.ports import ScanRequest
from fsm.records import AuditEntry, Decision, Job

from ._sql import Statements

_OWNER = JOB_COLUMNS.index("owner")
_SET_COLUMNS = tuple(c for c in JOB_COLUMNS if c != "id")
_set_values = operator.attrgetter(*_SET_COLUMNS)
audit_values = operator.attrgetter(*AUDIT_COLUMNS)


def entry_of(row: Sequence[Any]) -> AuditEntry:
    return audit_from_row(dict(zip(AUDIT_COLUMNS, row, strict=True)))


def job_arrays(jobs: Iterable[Job]) -> list[list[Any]]:
    """One array per column (the `unnest` parameters), mapped as adapters._rows.job_to_row."""
    listed = list(jobs)
    arrays = [[getattr(j, c) for j in listed] for c in JOB_COLUMNS]
    arrays[_OWNER] = [owner_to_text(j.owner) for j in listed]
    return arrays


def audit_arrays(entries: Iterable[AuditEntry]) -> list[list[Any]]:
    listed = list(entries)
    return [[getattr(e, c) for e in listed] for c in AUDIT_COLUMNS]


def changed(d: Decision) -> tuple[str, ...]:
    """The columns `d` changes, in column order; `version` always (it always grows)."""
    assert d.previous is not None
    differ = map(operator.ne, _set_values(d.job), _set_values(d.previous))
    return tuple(compress(_SET_COLUMNS, differ))  # version is among them: it always grows


def batch_params(rows: Sequence[Sequence[Any]]) -> tuple[tuple[bool, ...], list[Any]]:
    """`batch_rows` flags and parameters for `rows`: a column whose rows all hold the
    very same object (one `now`, one state name, None) goes as one scalar; the first
    column always goes as an array. Fewer values to dump, the same rows written.
    (Transposed and compared by identity in C: this runs for every batch written.)"""
    columns = list(zip(*rows, strict=True))
    varying = tuple(
        i == 0 or not all(map(operator.is_, column, repeat(column[0])))
        for i, column in enumerate(columns)
    )
    scalars = [column[0] for column, v in zip(columns, varying, strict=True) if not v]
    arrays = [list(column) for column, v in zip(columns, varying, strict=True) if v]
    return varying, scalars + arrays


@functools.lru_cache(maxsize=256)  # bounded: a transition changes one of a few column sets
def _values_of(columns: tuple[str, ...]) -> Callable[[Job], list[Any]]:
    """The values of `columns` of a job, read in C; the owner as its text."""
    get = operator.attrgetter(*columns)
    owner_at = columns.index("owner") if "owner" in columns else None

    def values(job: Job) -> list[Any]:
        got = get(job)
        out = list(got) if len(columns) > 1 else [got]
        if owner_at is not None:
            out[owner_at] = owner_to_text(job.owner)
        return out

    return values


def apply_statement(
    sql: Statements,
    decisions: Sequence[Decision],
    columns: tuple[str, ...] | None = None,
    *,
    audited: bool | None = None,
    checked: bool = False,
) -> tuple[str, list[Any]]:
    """The apply statement and its parameters, setting only the changed columns.

    Every write bumps `version`, so the row a compare-and-set on
    `d.previous.version` finds holds exactly `d.previous`: setting the columns
    that differ leaves it equal to `d.job`, field for field, while the row,
    the parameters and the server's work shrink to what changed. A batch
    whose decisions change different sets of columns sets every column.

    A caller that grouped the decisions by their changed columns passes them
    (`columns`); `audited=False` writes the rows without their audit entries
    (a claim-and-start writes every entry of a job in one statement of its own);
    `checked` (with `columns`) fails the transaction in the server unless every row
    is written, and answers nothing (`Statements.apply_changed`).
    """
    assert not checked or (columns is not None and audited is not None), "checked: name both"
    if columns is None:
        changes = {changed(d) for d in decisions}
        if len(changes) != 1:
            return sql.apply, apply_params(decisions)
        (columns,) = changes
    if audited is None:
        audited = all(d.entry is not None for d in decisions)
        if not (audited or all(d.entry is None for d in decisions)):
            return sql.apply, apply_params(decisions)
    entries = [d.entry for d in decisions if d.entry is not None] if audited else []
    if len(decisions) == 1:
        (d,) = decisions
        assert d.previous is not None
        params = [*_values_of(columns)(d.job), d.job.id, d.previous.version]
        if entries:
            params += [getattr(entries[0], c) for c in AUDIT_COLUMNS]
        if checked:
            params.append(1)
        return sql.apply_changed(columns, batch=False, audited=audited, checked=checked), params
    values = _values_of(columns)
    rows = [
        [d.job.id, d.previous.version if d.previous is not None else None, *values(d.job)]
        for d in decisions
    ]
    varying, params = batch_params(rows)
    if entries:
        audit_varying, audit_params = batch_params([audit_values(e) for e in entries])
        varying += audit_varying
        params += audit_params
    if checked:
        params.append(len(decisions))
    statement = sql.apply_changed(
        columns, batch=True, audited=audited, varying=varying, checked=checked
    )
    return statement, params


def apply_params(decisions: Sequence[Decision]) -> list[Any]:
    """The parameters of `Statements.apply` (every column, as arrays)."""
    entries = [d.entry for d in decisions if d.entry is not None]
    prev = [d.previous.version if d.previous is not None else None for d in decisions]
    return [prev, *job_arrays(d.job for d in decisions), *audit_arrays(entries)]


def scan_statement(sql: Statements, request: ScanRequest) -> tuple[str, dict[str, Any]]:
    statement = sql.scan(
        tuple(request.states),
        lease=request.lease_expired_at is not None,
        deadline=request.deadline_passed_at is not None,
        host=request.owner_host is not None,
        queues=request.queues is not None,
        kinds=request.kinds is not None,
    )
    params = {
        "lease": request.lease_expired_at,
        "deadline": request.deadline_passed_at,
        "host": request.owner_host,
        "queues": None if request.queues is None else list(request.queues),
        "kinds": None if request.kinds is None else list(request.kinds),
        "limit": request.limit,
    }
    return statement, params
