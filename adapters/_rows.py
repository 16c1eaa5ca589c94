"""Moved: `adapters.rows` (records <-> rows, `check_storable`), `adapters.claiming`
(`Unclaimable`, `decide_leases`, `Claimed`, `start_leased`) and `adapters.rejections`
(`rejected_key`, `first_rejections`).

These aliases keep the importers that have not moved yet working (adapters/postgres and
benchmarks/, being rewritten at the same time); delete this module once nothing
imports it. Nothing here is a second copy: every name is the moved one.
"""

from __future__ import annotations

from .claiming import (
    UNCLAIMABLE_RECHECK,
    UNCLAIMABLE_REMEMBERED,
    Claimed,
    Unclaimable,
    decide_leases,
    start_leased,
)
from .rejections import first_rejections, rejected_key
from .rows import (
    AUDIT_COLUMNS,
    INT64_MAX,
    INT64_MIN,
    JOB_COLUMNS,
    audit_from_row,
    audit_to_row,
    check_storable,
    job_from_row,
    job_from_values,
    job_to_row,
    owner_from_text,
    owner_to_text,
)

__all__ = [
    "AUDIT_COLUMNS",
    "INT64_MAX",
    "INT64_MIN",
    "JOB_COLUMNS",
    "UNCLAIMABLE_RECHECK",
    "UNCLAIMABLE_REMEMBERED",
    "Claimed",
    "Unclaimable",
    "audit_from_row",
    "audit_to_row",
    "check_storable",
    "decide_leases",
    "first_rejections",
    "job_from_row",
    "job_from_values",
    "job_to_row",
    "owner_from_text",
    "owner_to_text",
    "rejected_key",
    "start_leased",
]
