"""Rejected reports recorded once: a stale worker that repeats a report adds one audit
entry per (job, event, fence), in every store (`Store.record`)."""

from __future__ import annotations

from collections.abc import Iterable

from fsm.records import AuditEntry


def rejected_key(entry: AuditEntry) -> tuple[str, str, int] | None:
    """(job, event, fence) of a rejected entry, None for any other entry.

    `record` appends a rejected entry only if the job has none with the same key:
    a stale worker that repeats one report is recorded once, so the rejected
    entries of a job are bounded by its events times its fences.
    """
    if entry.outcome != "rejected":
        return None
    return (entry.job_id, entry.event, entry.fence)


def first_rejections(entries: Iterable[AuditEntry]) -> list[AuditEntry]:
    """`entries` without the repeats, within the batch, of a rejected (job, event, fence)."""
    seen: set[tuple[str, str, int]] = set()
    out: list[AuditEntry] = []
    for entry in entries:
        key = rejected_key(entry)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        out.append(entry)
    return out
