"""Records <-> SQL rows, shared by the SQL stores (one column per record field).

`owner` is stored as JSON text; everything else maps to a scalar column of the
same name. Stores pick their own SQL types; these helpers only convert values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fsm.records import AUDIT_FIELDS, JOB_FIELDS, AuditEntry, Job, Owner

JOB_COLUMNS: tuple[str, ...] = JOB_FIELDS
AUDIT_COLUMNS: tuple[str, ...] = AUDIT_FIELDS


def owner_to_text(owner: Owner | None) -> str | None:
    return None if owner is None else json.dumps(owner.to_dict(), separators=(",", ":"))


def owner_from_text(text: str | None) -> Owner | None:
    return None if text is None else Owner.from_dict(json.loads(text))


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
