"""Records <-> SQL rows, shared by the SQL stores (one column per record field).

`owner` is stored as JSON text; everything else maps to a scalar column of the
same name. Stores pick their own SQL types; these helpers only convert values.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import operator
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from math import isfinite
from typing import Any

import attrs

from fsm.errors import BadInput
from fsm.records import AUDIT_FIELDS, JOB_FIELDS, AuditEntry, Decision, Job, Owner

JOB_COLUMNS: tuple[str, ...] = JOB_FIELDS
AUDIT_COLUMNS: tuple[str, ...] = AUDIT_FIELDS
_OWNER_AT = JOB_COLUMNS.index("owner")
_RETRY_SAFE_AT = JOB_COLUMNS.index("retry_safe")
_RECONCILER_AT = JOB_COLUMNS.index("reconciler")

log = logging.getLogger(__name__)


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


# --- jobs a claim must skip --------------------------------------------------------------

#: how many unclaimable job ids a store remembers (oldest forgotten first)
UNCLAIMABLE_REMEMBERED = 1024
#: seconds a remembered unclaimable job is left out of claims before it is tried again
UNCLAIMABLE_RECHECK = 600.0


class Unclaimable:
    """Jobs whose `lease` decision raised during a claim: skipped, each logged once.

    A row the store's due filter selects but the core refuses to lease (a NaN time
    written behind jobfsm's back, a row edited by hand) must fail alone: the claim
    skips it and leases the jobs behind it. Each such job is logged once (with its
    id) and left out of this process's claims for UNCLAIMABLE_RECHECK seconds, so
    it costs no claim a slot; at most UNCLAIMABLE_REMEMBERED ids are remembered.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def known(self) -> list[str]:
        """Ids to leave out of claims (refused within the last UNCLAIMABLE_RECHECK s)."""
        if not self._seen:
            return []
        cutoff = time.monotonic() - UNCLAIMABLE_RECHECK
        with self._lock:
            for job_id in [i for i, at in self._seen.items() if at < cutoff]:
                del self._seen[job_id]
            return list(self._seen)

    def skip(self, job: Job, err: BaseException) -> None:
        with self._lock:
            if job.id in self._seen:
                return
            if len(self._seen) >= UNCLAIMABLE_REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[job.id] = time.monotonic()
        self._log.warning(
            "job %s (queue %r, state %r) cannot be leased: its lease decision failed "
            "(%s: %s); claims skip it and lease the jobs behind it",
            job.id,
            job.queue,
            job.state,
            type(err).__name__,
            err,
            extra={"job_id": job.id},
        )


def decide_leases(
    candidates: Iterable[Job], decide: Callable[[Job], Decision], skipped: Unclaimable
) -> tuple[list[Decision], list[str]]:
    """The core's lease decision for each candidate, and the ids of those it refused."""
    decisions: list[Decision] = []
    refused: list[str] = []
    for job in candidates:
        try:
            decisions.append(decide(job))
        except Exception as err:  # one job the core refuses fails alone, never the batch
            skipped.skip(job, err)
            refused.append(job.id)
    return decisions, refused


@attrs.frozen
class Claimed:
    """One job of a claim as the store writes it: `write` is the compare-and-set from
    the pre-image (`write.previous`) to the record returned (`write.job`: running after
    a claim-and-start, leased otherwise); `entries` are its audit entries in order.
    `write.entry` is the last of them (what a lost commit is reconciled by)."""

    write: Decision
    entries: tuple[AuditEntry, ...]


def start_leased(
    leases: Sequence[Decision], start: Callable[[Job], Decision] | None
) -> list[Claimed]:
    """Each lease decision, followed by the core's `start` decision on the leased record
    when the claim asks for one (`ClaimRequest.start`): one write per job from its
    pre-image to where it ends, both audit entries. A job whose start decision raises
    stays leased (logged); the caller starts it, or fails it, on its own."""
    out: list[Claimed] = []
    for lease in leases:
        entries: tuple[AuditEntry, ...] = () if lease.entry is None else (lease.entry,)
        if start is not None:
            try:
                begun = start(lease.job)
            except Exception as err:  # this job alone is not started here
                log.info("job %s: leased but not started in its claim: %s", lease.job.id, err)
            else:
                if begun.entry is not None:
                    entries += (begun.entry,)
                write = begun.since(lease.previous)
                out.append(Claimed(write, entries))
                continue
        out.append(Claimed(lease, entries))
    return out


# --- rejected reports -----------------------------------------------------------------------


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
