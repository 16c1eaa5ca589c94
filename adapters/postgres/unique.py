"""Unique submits on PostgreSQL (docs/uniqueness.md): the statements that find the
twins of a batch's unique jobs, under a lock that makes the find and the insert one
step for every submitter of the same key.

Why a lock, and why before the find: under READ COMMITTED two transactions that each
look for a live job of key K and find none would both insert one; no unique index can
express a scope of states and a time window. So each transaction first takes a
transaction advisory lock per (schema, kind, key) (class UNIQUE_CLASS, in sorted
order, before any capacity lock), in its own statement; the find runs in a later
statement, whose snapshot is taken after the lock was granted, so it sees every job
the previous holder committed (it released the lock at its commit). A REPEATABLE READ
transaction keeps its first snapshot and could miss it: a caller's transaction of that
level is refused (`check_isolation`); SERIALIZABLE is safe (its conflict detection
aborts one of two such writers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters._rows import job_from_values
from fsm.errors import BadInput
from fsm.records import Decision, Job

from . import migrations
from ._sql import Statements, cols

#: the isolation levels whose statements each see what committed before them
SAFE_ISOLATION = ("read committed", "serializable")


class UniqueLookup:
    """The twins of a batch's unique jobs: `statements` (the locks, then one find per
    unique job) and `resolve(rows)` -> (twins by the new job's id, the decisions to
    insert). A refusing scope with a twin raises DuplicateJob (the caller rolls back)."""

    def __init__(self, sql: Statements, schema: str, decisions: Sequence[Decision]) -> None:
        self.decisions = decisions
        self.unique = [d for d in decisions if d.unique is not None]
        locks = sorted(
            {
                migrations.key32(f"{schema}\x00{d.job.kind}\x00{d.job.unique_key}")
                for d in self.unique
            }
        )
        find = (
            f"SELECT {cols()} FROM {sql.jobs} WHERE kind = %s AND unique_key = %s "
            "AND created_at > %s AND state = ANY(%s::text[]) "
            "ORDER BY created_at DESC, id DESC LIMIT 1"
        )
        self.statements: list[tuple[str, Sequence[Any]]] = [
            *((sql.capacity_lock, [migrations.UNIQUE_CLASS, k]) for k in locks),
        ]
        self.locks = len(locks)
        for d in self.unique:
            s = d.unique
            assert s is not None
            self.statements.append((find, [s.kind, s.key, s.since, list(s.states)]))
        # an idempotency key is checked first (as on every store): the unique jobs that
        # carry one read its stored job too, so a used key never takes a unique slot
        self.keys = sorted({k for d in self.unique if (k := d.job.idempotency_key) is not None})
        if self.keys:
            self.statements.append((sql.by_key, [self.keys, []]))

    def resolve(
        self, rows: Sequence[Sequence[Sequence[Any]]]
    ) -> tuple[dict[str, Job], list[Decision]]:
        """`rows`: of every statement, in order. A unique job earlier in the batch is
        a candidate too (one statement inserts the batch: it cannot see its own rows)."""
        found = iter(rows[self.locks : self.locks + len(self.unique)])
        used = {
            job.idempotency_key: job for job in map(job_from_values, rows[-1] if self.keys else [])
        }
        twins: dict[str, Job] = {}
        rest: list[Decision] = []
        batch: dict[tuple[str, str], list[Job]] = {}
        for d in self.decisions:
            scope = d.unique
            if scope is None:
                rest.append(d)
                continue
            stored = [job_from_values(r) for r in next(found)]
            key = d.job.idempotency_key
            if key is not None and key in used:
                twins[d.job.id] = used[key]
                continue
            if key is not None:
                used[key] = d.job  # a later item of the batch with this key is its twin
            twin = scope.twin([*stored, *batch.get((scope.kind, scope.key), ())])
            if twin is None:
                rest.append(d)
                batch.setdefault((scope.kind, scope.key), []).append(d.job)
            else:
                twins[d.job.id] = twin
        return twins, rest


def settled(decisions: Sequence[Decision], jobs: Sequence[Job]) -> list[Job]:
    """`jobs` (one per decision) with each twin that is a job of this very batch
    replaced by what that job's decision came to: itself if inserted, or the stored job
    of its idempotency key if a concurrent submitter used the key first."""
    final = {d.job.id: job for d, job in zip(decisions, jobs, strict=True)}
    return [
        final.get(job.id, job) if job.id != d.job.id else job
        for d, job in zip(decisions, jobs, strict=True)
    ]


def check_isolation(level: str) -> None:
    """BadInput for a caller's transaction whose snapshot could hide a committed twin."""
    if level not in SAFE_ISOLATION:
        raise BadInput(
            f"conn= of a transactional submit: a unique submit needs a READ COMMITTED or "
            f"SERIALIZABLE transaction; this one is {level.upper()}, whose snapshot could "
            "hide a job another submitter committed with the same key"
        )
