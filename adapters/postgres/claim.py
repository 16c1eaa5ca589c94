"""Claim for the PostgreSQL store (a mixin of PostgresStore): the blocking worker's
hottest path, so it is plain code on one connection, not a plan. Its lost commit is
reconciled by the plans' own rule (`plan.reconcile`, `plan.confirm`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs
import psycopg

from adapters._rows import (
    JOB_COLUMNS,
    Claimed,
    Unclaimable,
    job_from_values,
    owner_to_text,
    start_leased,
)
from fsm.errors import StoreError
from fsm.ports import ClaimRequest
from fsm.records import Decision, Job

from ._base import Conn, roll_back
from ._sql import ClaimShape
from ._url import Settings
from .limits import PostgresLimits, applicable_rows
from .params import apply_statement, audit_values, batch_params, changed
from .plan import confirm, reconcile

log = logging.getLogger(__name__)

#: how many times one claim looks again past jobs the core refused to lease
CLAIM_ROUNDS = 4
_N = len(JOB_COLUMNS)


def _lease_order(job: Job) -> tuple[int, float, str]:
    return (job.priority, job.run_after, job.id)


class PostgresClaims(PostgresLimits):
    """`Store.claim`: lease (and with `request.start`, start) due jobs in one transaction."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._unclaimable = Unclaimable(log)
        self._limits_select = (
            "SELECT key, concurrency, rate, period, origin, actor, reason, at FROM "
            f"{self._limits_table('limits')}"
        )

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.limit < 1 or not request.queues or not request.states:
            return []
        if (request.ids is not None and not request.ids) or request.kinds == ():
            return []
        skip = self._unclaimable.known()
        for _ in range(CLAIM_ROUNDS):  # bounded: a round only repeats past refused jobs
            leased, refused = self._claim_once(request, skip)
            if not refused:
                return leased
            skip = [*skip, *refused]
        return []  # every round met a job the core refused: the next claim goes on

    def _claim_once(
        self, request: ClaimRequest, skip: Sequence[str]
    ) -> tuple[list[Job], list[str]]:
        """One lease transaction. A job whose lease decision raises is refused: the
        transaction rolls back and its id comes back, for the next round to skip.

        A plain claim leases in its first statement (SQL) and checks each row against
        the core's decision. A claim-and-start (`request.start`) only locks in its
        first statement; the core decides the lease and the start, and each row is
        written once, from its pre-image to running, before the one commit."""
        one_queue = len(set(request.queues)) == 1
        shape: ClaimShape = (
            tuple(request.states),
            request.ids is not None,
            one_queue,
            bool(skip),
            request.kinds is not None,
            False,
        )
        statement = self.sql.lock(shape) if request.start else self.sql.claim(shape)
        params = {
            "queues": list(request.queues),
            "queue": request.queues[0],
            "now": request.now,
            "limit": request.limit,
            "ids": None if request.ids is None else list(request.ids),
            "owner": owner_to_text(request.owner),
            "lease_until": request.lease_until,
            "skip": list(skip),
            "kinds": None if request.kinds is None else list(request.kinds),
        }
        claimed: list[Claimed] = []
        refused: list[str] = []
        lost: psycopg.Error | None = None
        with self.connection("claim") as conn:
            backend = conn.info.backend_pid
            try:
                # round trip 1: BEGIN, the limits and the lease (or lock) statement,
                # pipelined. The statement leases nothing while a limit is stored.
                with conn.pipeline():
                    conn.execute("BEGIN")
                    stored = conn.execute(self._limits_select)
                    # a worker with limits of its own counts every claim: no plain lease
                    cursor = None if request.caps else conn.execute(statement, params)
                rows = [] if cursor is None else cursor.fetchall()
                limits = applicable_rows(stored.fetchall(), request)
                limited = not rows and (bool(limits) or bool(request.caps))
                pairs = [(job_from_values(r[:_N]), r) for r in rows]
                if limited:  # in this transaction: count, and lease what the budget admits
                    counted = (*shape[:3], True, shape[4], True)
                    request, pre = self.claim_under_limits(
                        conn, request, limits, self.sql.lock(counted), params
                    )
                    pairs = [(j, ()) for j in pre]
                decisions: list[Decision] = []
                for before, row in pairs:
                    try:
                        decision = request.decide(before)
                    except Exception as err:  # one job the core refuses fails alone
                        self._unclaimable.skip(before, err)
                        refused.append(before.id)
                        continue
                    if (
                        request.start is None
                        and not limited
                        and decision.job != (after := job_from_values(row[_N:]))
                    ):
                        raise StoreError(_disagreement(before, after, decision.job))
                    decisions.append(decision)
                if refused:
                    roll_back(conn)
                    return [], refused
                decisions.sort(key=lambda d: _lease_order(d.job))
                claimed = start_leased(decisions, request.start)
                if (request.start is not None or limited) and claimed:
                    # round trip 2: each locked row written once (compare-and-set on
                    # the version just read under the lock), with every audit entry
                    self._write_claimed(conn, claimed)
            except BaseException:
                roll_back(conn)
                raise
            plain = request.start is None and not limited
            entries = [e for c in claimed for e in c.entries] if plain else []
            try:
                # last round trip: a plain claim's audit entries, and COMMIT, pipelined
                with conn.pipeline():
                    if entries:
                        varying, rows = batch_params([audit_values(e) for e in entries])
                        conn.execute(self.sql.audit_insert_rows(varying), rows)
                    if limited:  # the rate windows, with the commit (nothing to read)
                        self.mark_leases(conn, limits, [c.write.job for c in claimed], request.now)
                    conn.execute("COMMIT")
            except psycopg.Error as err:
                if not conn.broken:
                    roll_back(conn)
                    raise
                lost = err
            else:
                return [c.write.job for c in claimed], []
        if not claimed:
            self.purge()
            return [], []  # nothing was leased, so nothing can have been committed
        assert lost is not None
        writes = [c.write for c in claimed]
        what = f"claim of {len(claimed)} jobs"
        confirmed = confirm(self.target, writes, what)
        self.run(reconcile(self.target, "claim", lost, confirmed, backend), "claim")
        return [w.job for w in writes], []  # one transaction: any of it shows, all of it did

    def _write_claimed(self, conn: Conn, claimed: Sequence[Claimed]) -> None:
        """Write a claim-and-start's rows and audit entries in one pipelined round trip
        inside the claim's transaction; every row must be written (we hold its lock)."""
        writes = [c.write for c in claimed]
        groups: dict[tuple[str, ...], list[Decision]] = {}
        for w in writes:  # a job whose start was refused is only leased: other columns
            groups.setdefault(changed(w), []).append(w)
        entries = [e for c in claimed for e in c.entries]
        with conn.pipeline():  # the rows without their entries: those are all written below
            cursors = [
                conn.execute(*apply_statement(self.sql, g, columns, audited=False))
                for columns, g in groups.items()
            ]
            if entries:
                varying, rows = batch_params([audit_values(e) for e in entries])
                conn.execute(self.sql.audit_insert_rows(varying), rows)
        written = {r[0] for c in cursors for r in c.fetchall()}
        missing = [w.job.id for w in writes if w.job.id not in written]
        if missing:
            raise StoreError(
                f"claim: {len(missing)} locked job(s) were not written as the core decided "
                f"(first {missing[0]}); the claim is rolled back"
            )


def _disagreement(before: Job, after: Job, decided: Job) -> str:
    fields = [
        f"{f.name}: store {getattr(after, f.name)!r}, core {getattr(decided, f.name)!r}"
        for f in attrs.fields(Job)
        if getattr(after, f.name) != getattr(decided, f.name)
    ]
    return (
        f"job {before.id}: the store's lease of state {before.state!r} disagrees with the "
        f"core's lease decision ({'; '.join(fields)}); rolled back"
    )
