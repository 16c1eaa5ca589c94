"""Records <-> SQL rows, shared by the SQL stores (one column per record field), and
the check that every store makes before it writes a record (`check_storable`).

`owner` is stored as JSON text; everything else maps to a scalar column of the
same name. Stores pick their own SQL types; these helpers only convert values.
"""

from __future__ import annotations

import functools
import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from math import isfinite
from typing import Any

import attrs

from fsm.errors import BadInput
from fsm.lifecycle.limits import Limit
from fsm.records import AUDIT_FIELDS, JOB_FIELDS, AuditEntry, Job, Owner

JOB_COLUMNS: tuple[str, ...] = JOB_FIELDS
AUDIT_COLUMNS: tuple[str, ...] = AUDIT_FIELDS
_OWNER_AT = JOB_COLUMNS.index("owner")
_RETRY_SAFE_AT = JOB_COLUMNS.index("retry_safe")
_RECONCILER_AT = JOB_COLUMNS.index("reconciler")
_PINNED_AT = JOB_COLUMNS.index("retry_safe_pinned")
#: a limit's row: one column per field of `Limit`, in its order
LIMIT_FIELDS: tuple[str, ...] = tuple(a.name for a in attrs.fields(Limit))
LIMIT_COLUMNS = ", ".join(LIMIT_FIELDS)
limit_to_row: Callable[[Limit], tuple[Any, ...]] = operator.attrgetter(*LIMIT_FIELDS)


def limit_from_row(row: Sequence[Any]) -> Limit:
    """A Limit from the first len(LIMIT_FIELDS) values of a row in LIMIT_COLUMNS order."""
    return Limit(*row[: len(LIMIT_FIELDS)])


def owner_to_text(owner: Owner | None) -> str | None:
    return None if owner is None else _owner_text(owner)


@functools.lru_cache(maxsize=1024)  # bounded: a worker writes its own owner on every job
def _owner_text(owner: Owner) -> str:
    return json.dumps(owner.to_dict(), separators=(",", ":"))


def owner_from_text(text: str | None) -> Owner | None:
    return None if text is None else Owner.from_dict(json.loads(text))


@functools.lru_cache(maxsize=1024)  # a worker reads its own few owners over and over
def _owner_parsed(text: str) -> Owner:
    return Owner.from_dict(json.loads(text))  # Owner is frozen: sharing one is safe


def job_from_values(row: Sequence[Any]) -> Job:
    """A Job from a row in `JOB_COLUMNS` order: `job_from_row`'s mapping, positionally.

    Several times cheaper than building a mapping first (stores read a row per job
    on every claim); `test_job_from_values_matches_job_from_row` pins the equivalence.
    """
    if len(row) != len(JOB_COLUMNS):
        raise ValueError(f"a job row has {len(JOB_COLUMNS)} columns, got {len(row)}")
    values = list(row)
    owner = values[_OWNER_AT]
    if owner is not None:
        values[_OWNER_AT] = _owner_parsed(owner)
    values[_RETRY_SAFE_AT] = bool(values[_RETRY_SAFE_AT])
    values[_RECONCILER_AT] = bool(values[_RECONCILER_AT])
    values[_PINNED_AT] = bool(values[_PINNED_AT])
    return Job(*values)


def job_to_row(job: Job) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in JOB_COLUMNS}
    row["owner"] = owner_to_text(job.owner)
    return row


def job_from_row(row: Mapping[str, Any]) -> Job:
    values = {name: row[name] for name in JOB_COLUMNS}
    values["owner"] = owner_from_text(values["owner"])
    values["retry_safe"] = bool(values["retry_safe"])
    values["reconciler"] = bool(values["reconciler"])
    values["retry_safe_pinned"] = bool(values["retry_safe_pinned"])
    return Job(**values)


def audit_to_row(entry: AuditEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in AUDIT_COLUMNS}


def audit_from_row(row: Mapping[str, Any]) -> AuditEntry:
    return AuditEntry(**{name: row[name] for name in AUDIT_COLUMNS})


# --- values a store can hold ---------------------------------------------------------

#: the 64-bit signed range every store holds integers in (PostgreSQL bigint, SQLite INTEGER)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _fields_typed(cls: type, *types: str) -> tuple[str, ...]:
    return tuple(f.name for f in attrs.fields(cls) if f.type in types)


_JOB_FLOATS = _fields_typed(Job, "float", "float | None")
_JOB_INTS = _fields_typed(Job, "int")
_AUDIT_FLOATS = _fields_typed(AuditEntry, "float")
_AUDIT_INTS = _fields_typed(AuditEntry, "int")
_job_floats = operator.attrgetter(*_JOB_FLOATS)
_job_ints = operator.attrgetter(*_JOB_INTS)
_audit_ints = operator.attrgetter(*_AUDIT_INTS)


def _refuse(
    what: str,
    names: tuple[str, ...],
    floats: Sequence[Any],
    ints: Sequence[Any],
    int_names: tuple[str, ...],
) -> None:
    for name, value in zip(names, floats, strict=True):
        if value is not None and not math.isfinite(value):
            raise BadInput(
                f"{what}: {name} is {value!r}; a store holds finite times only "
                "(SQLite would turn NaN into NULL, PostgreSQL would compare it as infinite)"
            )
    for name, value in zip(int_names, ints, strict=True):
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadInput(f"{what}: {name} is {value!r}, outside the 64-bit range a store holds")


def check_storable(jobs: Iterable[Job] = (), entries: Iterable[AuditEntry | None] = ()) -> None:
    """Refuse (BadInput naming the job and field) a record a store cannot hold exactly:
    a NaN or infinite time, an integer outside 64 bits. Every store calls it before it
    writes, so no store silently changes a value (SQLite stores NaN as NULL)."""
    for job in jobs:
        ints = _job_ints(job)
        # the common case in one pass: a sum is finite only if every term is (a sum of
        # huge finite times may overflow: the field-by-field check then passes it);
        # filter(None, ...) leaves out the unset times (and zeros, which add nothing)
        if isfinite(sum(filter(None, _job_floats(job)))) and (
            min(ints) >= INT64_MIN and max(ints) <= INT64_MAX
        ):
            continue
        _refuse(f"job {job.id}", _JOB_FLOATS, _job_floats(job), ints, _JOB_INTS)
    for entry in entries:
        if entry is None:
            continue
        floats, ints = (entry.at,), _audit_ints(entry)
        if isfinite(entry.at) and min(ints) >= INT64_MIN and max(ints) <= INT64_MAX:
            continue
        _refuse(f"audit entry of job {entry.job_id}", _AUDIT_FLOATS, floats, ints, _AUDIT_INTS)
