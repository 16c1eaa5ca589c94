"""jobfsm's records as the raw rows the baselines write with a plain driver, no store code.

A raw baseline writes the same rows into jobfsm's own tables as the store would (the
store's migrations create the tables): one column per field of `fsm.records.Job` and
`AuditEntry`, in `JOB_FIELDS` / `AUDIT_FIELDS` order, the owner as compact JSON text
of `Owner.to_dict()`. Only the benchmarks' raw writers and bulk fills use this.
"""

from __future__ import annotations

import json
from typing import Any

from fsm.records import AUDIT_FIELDS, JOB_FIELDS, AuditEntry, Job, Owner

JOB_COLUMNS: tuple[str, ...] = JOB_FIELDS
AUDIT_COLUMNS: tuple[str, ...] = AUDIT_FIELDS
_OWNER_AT = JOB_COLUMNS.index("owner")


def owner_text(owner: Owner | None) -> str | None:
    return None if owner is None else json.dumps(owner.to_dict(), separators=(",", ":"))


def job_values(job: Job) -> list[Any]:
    """The job's row, in `JOB_COLUMNS` order."""
    values = [getattr(job, name) for name in JOB_COLUMNS]
    values[_OWNER_AT] = owner_text(job.owner)
    return values


def audit_values(entry: AuditEntry) -> list[Any]:
    """The audit entry's row, in `AUDIT_COLUMNS` order."""
    return [getattr(entry, name) for name in AUDIT_COLUMNS]


def inserts(mark: str) -> tuple[str, str]:
    """(INSERT of a job row, INSERT of an audit row) with the driver's placeholder `mark`."""
    jobs = (
        f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(JOB_COLUMNS))})"
    )
    audit = (
        f"INSERT INTO job_events ({', '.join(AUDIT_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(AUDIT_COLUMNS))})"
    )
    return jobs, audit
