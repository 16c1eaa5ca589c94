"""Records <-> SQL rows, shared by the SQL stores (one column per record field).

`owner` is stored as JSON text; everything else maps to a scalar column of the
same name. Stores pick their own SQL types; these helpers only convert values.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from fsm.records import AUDIT_FIELDS, JOB_FIELDS, AuditEntry, Job, Owner

JOB_COLUMNS: tuple[str, ...] = JOB_FIELDS
AUDIT_COLUMNS: tuple[str, ...] = AUDIT_FIELDS
_OWNER_AT = JOB_COLUMNS.index("owner")
_RETRY_SAFE_AT = JOB_COLUMNS.index("retry_safe")


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
    return Job(*values)


def job_to_row(job: Job) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in JOB_COLUMNS}
    row["owner"] = owner_to_text(job.owner)
    return row


def job_from_row(row: Mapping[str, Any]) -> Job:
    values = {name: row[name] for name in JOB_COLUMNS}
    values["owner"] = owner_from_text(values["owner"])
    values["retry_safe"] = bool(values["retry_safe"])
    return Job(**values)


def audit_to_row(entry: AuditEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in AUDIT_COLUMNS}


def audit_from_row(row: Mapping[str, Any]) -> AuditEntry:
    return AuditEntry(**{name: row[name] for name in AUDIT_COLUMNS})
