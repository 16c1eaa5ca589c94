"""Claim for the PostgreSQL store (a mixin of PostgresStore): the blocking worker's
hottest path, so it is plain code on one connection, not a plan. Its lost commit is
reconciled by the plans' own rule (`plan.reconcile`, `plan.confirm`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

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
from fsm.lifecycle.limits import Limit
from fsm.ports import ClaimRequest
from fsm.records import Decision, Job

from ._base import Conn, roll_back
from ._sql import UNWRITTEN, ClaimShape
from ._url import Settings
from .limits import GATE_CLOSED, Counting, Gate, PostgresLimits, applicable_rows
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
            "SELECT key, concurrency, rate, period, origin, actor, reason, at, leased FROM "
            f"{self._limits_table('limits')}"
        )
        #: the rows of `limits` the last claim read (None: no claim yet)
        self._limits_seen: list[tuple[Any, ...]] | None = None

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
        self, request: ClaimRequest, skip: Sequence[str], ahead: bool = True
    ) -> tuple[list[Job], list[str]]:
        """One lease transaction. A job whose lease decision raises is refused: the
        transaction rolls back and its id comes back, for the next round to skip.

        A plain claim leases in its first statement (SQL) and checks each row against
        the core's decision. A claim-and-start (`request.start`) only locks in its
        first statement; the core decides the lease and the start, and each row is
        written once, from its pre-image to running, before the one commit.

        While limits are stored (or the worker has caps of its own), a claim counts
        under the limits the last claim read (`ahead`) in its first round trip, where
        it reads the limits too: if they changed, it rolls back and claims again,
        counting under the ones it read."""
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
        seen = self._limits_seen if ahead else None
        expected = (
            None if seen is None or not (seen or request.caps) else applicable_rows(seen, request)
        )
        counted = self.sql.lock((*shape[:3], True, shape[4], True))
        # within the handle's last counts while they hold a whole claim at the running
        # totals the last claim read (checked again at the totals this one reads)
        cached = (
            expected is not None
            and seen is not None
            and self.counts_cover(expected, {r[0]: r[8] for r in seen}, request)
        )
        try:
            return self._lease(request, statement, params, expected, counted, cached=cached)
        except _LimitsChanged:
            return self._claim_once(request, skip, ahead=False)

    def _lease(
        self,
        request: ClaimRequest,
        statement: str,
        params: dict[str, Any],
        expected: list[Limit] | None,
        counted: str,
        *,
        cached: bool,
    ) -> tuple[list[Job], list[str]]:
        claimed: list[Claimed] = []
        refused: list[str] = []
        lost: psycopg.Error | None = None
        with self.connection("claim") as conn:
            backend = conn.info.backend_pid
            try:
                # round trip 1: BEGIN, the limits and the lease (or lock) statement,
                # pipelined. The statement leases nothing while a limit is stored; a
                # claim that expects limits sends its counts under them instead.
                counting: Counting | None = None
                cursor = None
                with conn.pipeline():
                    conn.execute("BEGIN")
                    stored = conn.execute(self._limits_select)
                    if expected is not None:  # ahead of the key locks (taken at the commit)
                        counting = self.count_under_limits(
                            conn, request, expected, counted, params, locked=False, cached=cached
                        )
                    elif not request.caps:  # a worker's own caps count every claim
                        cursor = conn.execute(statement, params)
                found = stored.fetchall()
                self._limits_seen = found
                rows = [] if cursor is None else cursor.fetchall()
                limits = applicable_rows(found, request)
                if counting is not None and limits != expected:
                    raise _LimitsChanged  # rolled back below; counted again under these
                # any limit stored, even of other queues, stops the plain statement
                limited = not rows and (bool(found) or bool(request.caps))
                pairs = [(job_from_values(r[:_N]), r) for r in rows]
                gate: Gate | None = None
                if counting is not None:
                    limited = True
                    totals = {r[0]: r[8] for r in found}
                    request, pre, gate = self.admit_ahead(conn, request, counting, totals)
                    pairs = [(j, ()) for j in pre]
                elif limited:  # count under the key locks, in a round trip of its own
                    with conn.pipeline():
                        counting = self.count_under_limits(conn, request, limits, counted, params)
                    request, pre = self.admit_counted(conn, request, counting)
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
                if request.start is not None and not limited and claimed:
                    # round trip 2: each locked row written once (compare-and-set on
                    # the version just read under the lock), with every audit entry
                    self._write_claimed(conn, claimed)
            except BaseException:
                roll_back(conn)
                raise
            plain = request.start is None and not limited
            entries = [e for c in claimed for e in c.entries] if plain else []
            try:
                # last round trip: a plain claim's audit entries, and COMMIT, pipelined.
                # Under limits the keys stay locked to the commit, so the rows go here
                # (written as in round trip 2, checked in the server), and the rate
                # windows: one round trip with the keys locked, not two.
                with conn.pipeline():
                    if limited and claimed:  # each fails the transaction unless all written
                        self._send_claimed(conn, claimed, checked=True)
                    if entries:
                        varying, rows = batch_params([audit_values(e) for e in entries])
                        conn.execute(self.sql.audit_insert_rows(varying), rows)
                    if limited:  # the key totals and rate windows, and the gate's check
                        jobs = [c.write.job for c in claimed]
                        self.mark_leases(conn, limits, jobs, request.now, gate)
                    conn.execute("COMMIT", prepare=False if limited else None)
            except psycopg.Error as err:
                if not conn.broken:
                    roll_back(conn)
                    if GATE_CLOSED in str(err):
                        raise _LimitsChanged from err  # counted again under the locks
                    if UNWRITTEN in str(err):
                        raise StoreError(
                            f"claim: not every one of the {len(claimed)} locked jobs was "
                            "written as the core decided; the claim is rolled back"
                        ) from err
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
        with conn.pipeline():
            cursors = self._send_claimed(conn, claimed)
        written = {r[0] for c in cursors for r in c.fetchall()}
        missing = [c.write.job.id for c in claimed if c.write.job.id not in written]
        if missing:
            raise StoreError(
                f"claim: {len(missing)} locked job(s) were not written as the core decided "
                f"(first {missing[0]}); the claim is rolled back"
            )

    def _send_claimed(
        self, conn: Conn, claimed: Sequence[Claimed], *, checked: bool = False
    ) -> list[psycopg.Cursor[tuple[Any, ...]]]:
        """Send (in the caller's pipeline) the rows of `claimed`, grouped by the columns
        they change, then every audit entry; the cursors answer the ids written, or
        with `checked` nothing: each group's statement then fails the transaction in
        the server unless it wrote every row of its group (a claim under limits reads
        no answer before its commit, which follows in the same pipeline, never
        prepared: an aborted pipeline then skips no statement the connection prepares)."""
        writes = [c.write for c in claimed]
        groups: dict[tuple[str, ...], list[Decision]] = {}
        for w in writes:  # a job whose start was refused is only leased: other columns
            groups.setdefault(changed(w), []).append(w)
        entries = [e for c in claimed for e in c.entries]
        # the rows without their entries: those are all written below
        cursors = [
            conn.execute(*apply_statement(self.sql, g, columns, audited=False, checked=checked))
            for columns, g in groups.items()
        ]
        if entries:
            varying, rows = batch_params([audit_values(e) for e in entries])
            conn.execute(self.sql.audit_insert_rows(varying), rows)
        return cursors


class _LimitsChanged(Exception):
    """The limits a claim read are not those it counted under (its transaction is
    rolled back; it claims again under the ones it read)."""


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
