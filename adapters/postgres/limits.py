"""`fsm.ports.LimitsClaims` for PostgreSQL: the `limits`, `limit_changes` and
`limit_leases` tables of migrations 10 and 12 (docs/flow-control.md).

A claim under limits serializes with the other claims of a limited key on a
transaction advisory lock per key (taken in one order, so claimers never deadlock),
held to its commit, so no interleaving can lease past a limit. Claims of keys
without limits take no such lock. Two ways to hold it:

- counted under the lock (`count_under_limits`, `admit_counted`): take the locks,
  count the jobs holding a slot and the leases within each rate window, read the
  clock again and lease what the budget admits;
- counted ahead of it (`locked=False`, `admit_ahead`, `mark_leases` with a gate): count without
  the locks in the claim's first round trip, decide, then take the locks with the
  writes and the commit, and check there that no more leases were granted under
  each key since the count (`limits.leased`, a running total every claim under
  limits adds to) than the room the count left. The locks are then held for one
  round trip of the server's work, not for the claim's decisions, and only the locks
  of the keys it leases under: a job its count holds back stays queued, and a kind
  held at its cap costs the claims of the other kinds no lock and no wait. A claim
  whose check fails counts again under the locks.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from fsm.lifecycle.limits import (
    Budget,
    Limit,
    LimitChange,
    allowance,
    applicable,
    job_keys,
    window_start,
)
from fsm.ports import ClaimRequest
from fsm.records import Job

from ..claiming import claim_within, rate_marks
from ..rows import LIMIT_COLUMNS as _COLUMNS
from ..rows import LIMIT_FIELDS, job_from_values, limit_from_row, limit_to_row
from . import migrations
from ._base import Conn, Connected
from ._sql import state_list
from ._url import Settings

_MARKS = ", ".join("%s" for _ in LIMIT_FIELDS)

_CHANGE = "seq, key, at, actor, reason, origin, before, after"


@attrs.frozen
class Counting:
    """A claim's counts under `limits`, sent and not yet read: the jobs holding a slot
    by (column, cursor), the leases of each rate window by (key, cursor), and the first
    candidates, locked by `lock` with `params`, leaving out the kinds in `guess` (those
    the handle's last claim found spent: `PostgresLimits.spent_kinds`)."""

    limits: Sequence[Limit]
    lock: str
    params: dict[str, Any]
    held: list[tuple[str, Any]]
    recent: list[tuple[str, Any]]
    first: Any
    guess: tuple[str, ...] = ()
    #: nothing counted: the claim leases within the counts its handle kept (`Count`)
    cached: bool = False

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(jobs holding a slot, leases in the rate window), by key."""
        return read_counts(self.held, self.recent)

    def candidates(self) -> list[Job]:
        """The first candidates, locked with the counts."""
        return [job_from_values(r) for r in self.first.fetchall()]


def read_counts(
    held_reads: Sequence[tuple[str, Any]], recent_reads: Sequence[tuple[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """The answers of `PostgresLimits.send_counts`: (jobs holding a slot, leases in
    the rate window), by key."""
    held: dict[str, int] = {}
    for column, cursor in held_reads:
        for name, n in cursor.fetchall():
            held[f"{column}:{name}"] = int(n)
    recent: dict[str, int] = {}
    for key, cursor in recent_reads:
        row = cursor.fetchone()
        recent[key] = int(row[0]) if row else 0
    return held, recent


@attrs.frozen
class Gate:
    """What a claim counted ahead of its key locks must find under them: for each
    limit it leases under (`limits`), the limit unchanged and no more leases granted
    under its key since the count (`leased`: the key's running total then), its own
    included, than the count allowed (`allowance`)."""

    limits: Sequence[Limit]
    leased: Sequence[int]
    allowance: Sequence[int]


@attrs.frozen
class Count:
    """What a count ahead of the key locks left for later claims of its handle: the
    limit as counted, the key's running total of leases read before the count
    (`leased`), and the room the count found (`allowance`). The argument of
    `admit_ahead` holds for any such count, however old: every job holding a slot
    now held it at the count or was leased since (in the total), so a claim may
    lease within `allowance` minus the leases granted since, and its gate checks the
    total against this `leased` and `allowance`. The room only shrinks with age (a
    finished job or a lease leaving its window is not credited), so an old count is
    used while it still leaves room for a whole claim, and counted again after."""

    limit: Limit
    leased: int
    allowance: int

    def room(self, total: int) -> int:
        """The room left when the key's running total is `total`."""
        return self.allowance - (total - self.leased)


#: A claim deletes the rows of `limit_leases` that left the rate window of a key it
#: leases under only when its leases carry the key's running total (`limits.leased`)
#: past a multiple of this, or of the key's rate if lower (`PostgresLimits.mark_leases`),
#: not at every claim: each delete leaves index entries that every later scan of the key
#: walks until vacuum removes them. The totals move under the key locks, so exactly one
#: committed claim passes each multiple (a rolled-back one leaves it to the next that
#: commits). A key so keeps the rows of at most rate + min(rate, EXPIRE_EVERY) leases:
#: at most `rate` in the window of the last claim that deleted (the limit holds there)
#: and fewer than the step granted since. The counts read only `at > start`: a row
#: older than the window is never counted, however long it stays.
EXPIRE_EVERY = 1024
#: what a claim's gate fails with (`PostgresLimits.mark_leases`)
GATE_CLOSED = "jobfsm claim: limits moved since the count"
#: take the advisory locks of a JSON array of lock ids, in one order (no deadlock)
_LOCK_KEYS = (
    "SELECT count(pg_advisory_xact_lock(k)) FROM "
    "(SELECT e.k::int8 AS k FROM jsonb_array_elements_text(%s::jsonb) AS e(k) ORDER BY 1) "
    "AS keys"
)


def lock_id(schema: str, key: str) -> int:
    """The advisory lock id (a signed 64-bit integer) of a limit key in a schema."""
    digest = hashlib.blake2b(f"jobfsm-limit/{schema}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresLimits(Connected):
    """Mixed into PostgresStore."""

    #: the kinds whose budget this handle's last claim under limits spent: its next
    #: claim leaves them out of its first candidates, so a kind held at its cap costs
    #: the claims of the other kinds no second fetch (a guess only: `_admit` fetches
    #: again when one of them has room now)
    spent_kinds: tuple[str, ...] = ()

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        #: the last count ahead of the key locks, by key (`Count`): claims of this
        #: handle lease within it while it leaves room for a whole claim
        self._counts: dict[str, Count] = {}

    def counts_cover(
        self, limits: Sequence[Limit], totals: dict[str, int], request: ClaimRequest
    ) -> bool:
        """Whether a claim of `request` under `limits` may skip its count: no cap of
        the worker's own (counted by key every claim), and for each limit a count
        of this handle, of the limit as it is, whose room at the running totals
        last read (`totals`) still holds a whole claim."""
        if request.caps or not limits:
            return False
        for lim in limits:
            count = self._counts.get(lim.key)
            if count is None or count.limit != lim:
                return False
            if count.room(totals.get(lim.key, 0)) < request.limit:
                return False
        return True

    def _limits_table(self, name: str) -> str:
        return f"{migrations.quote(self.schema)}.{name}"

    def _changed(
        self, conn: Conn, key: str, before: Limit | None, after: Limit | None, by: Limit
    ) -> None:
        conn.execute(
            f"INSERT INTO {self._limits_table('limit_changes')} "
            "(key, at, actor, reason, origin, before, after) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                key,
                by.at,
                by.actor,
                by.reason,
                by.origin,
                None if before is None else before.describe(),
                None if after is None else after.describe(),
            ),
        )

    def set_limit(self, limit: Limit) -> Limit | None:
        t = self._limits_table("limits")
        with self.connection("set limit") as conn, conn.transaction():
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM {t} WHERE key = %s FOR UPDATE", (limit.key,)
            ).fetchall()
            before = limit_from_row(found[0]) if found else None
            conn.execute(
                f"INSERT INTO {t} ({_COLUMNS}) VALUES ({_MARKS}) "
                "ON CONFLICT (key) DO UPDATE SET concurrency = excluded.concurrency, "
                "rate = excluded.rate, period = excluded.period, origin = excluded.origin, "
                "actor = excluded.actor, reason = excluded.reason, at = excluded.at",
                limit_to_row(limit),
            )
            self._changed(conn, limit.key, before, limit, limit)
        return before

    def clear_limit(self, key: str, *, actor: str, reason: str, at: float) -> Limit | None:
        with self.connection("clear limit") as conn, conn.transaction():
            found = conn.execute(
                f"DELETE FROM {self._limits_table('limits')} WHERE key = %s RETURNING {_COLUMNS}",
                (key,),
            ).fetchall()
            if not found:
                return None
            conn.execute(f"DELETE FROM {self._limits_table('limit_leases')} WHERE key = %s", (key,))
            before = limit_from_row(found[0])
            self._changed(conn, key, before, None, Limit(key, actor=actor, reason=reason, at=at))
        return before

    def limits(self) -> dict[str, Limit]:
        with self.connection("limits") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM {self._limits_table('limits')}")
            return {r[0]: limit_from_row(r) for r in rows.fetchall()}

    def limit_changes(self, key: str | None = None, limit: int = 100) -> list[LimitChange]:
        where, params = ("WHERE key = %s", [key]) if key is not None else ("", [])
        with self.connection("limit changes") as conn:
            rows = conn.execute(
                f"SELECT {_CHANGE} FROM {self._limits_table('limit_changes')} {where} "
                "ORDER BY seq DESC LIMIT %s",
                [*params, max(0, limit)],
            ).fetchall()
        return [LimitChange(*r) for r in rows]

    def limit_usage(
        self, keys: Sequence[str], held: tuple[str, ...], waiting: tuple[str, ...]
    ) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        jobs = self._limits_table("jobs")
        with self.connection("limit usage") as conn:
            for key in keys:
                scope, _, name = key.partition(":")
                column = "kind" if scope == "kind" else "queue"
                counts = [
                    conn.execute(
                        f"SELECT count(*) FROM {jobs} WHERE state = ANY(%s::text[]) "
                        f"AND {column} = %s",
                        (list(states), name),
                    ).fetchone()
                    for states in (held, waiting)
                ]
                out[key] = (
                    int(counts[0][0]) if counts[0] else 0,
                    int(counts[1][0]) if counts[1] else 0,
                )
        return out

    def count_under_limits(
        self,
        conn: Conn,
        request: ClaimRequest,
        limits: Sequence[Limit],
        lock: str,
        params: dict[str, Any],
        *,
        locked: bool = True,
        cached: bool = False,
    ) -> Counting:
        """Send, inside the caller's pipeline on `conn` (the claim's open transaction),
        the statements of a claim under `limits`: lock their keys (unless not `locked`:
        a count ahead of the locks, see `admit_ahead`), count the jobs holding a slot and
        the leases of each rate window (unless `cached`: ahead of the locks, within the
        handle's last counts, `counts_cover`), and lock the first candidates (`lock`:
        the limited lock statement). Nothing is read: `admit_counted` reads the answers,
        so all of it rides on a round trip the claim makes anyway."""
        assert not (locked and cached), "a count under the locks is never skipped"
        if locked:
            ids = sorted({lock_id(self.schema, lim.key) for lim in limits})
            if ids:
                conn.execute(_LOCK_KEYS, (json.dumps(ids),))
        held, recent = ([], []) if cached else self.send_counts(conn, request, limits)
        guess = self.spent_kinds
        first = conn.execute(lock, {**params, "skip": list(params["skip"]), "blocked": list(guess)})
        return Counting(limits, lock, params, held, recent, first, guess, cached)

    def send_counts(
        self, conn: Conn, request: ClaimRequest, limits: Sequence[Limit]
    ) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        """Send the counts of `limits` (and of the worker's own caps): the jobs holding
        a slot by (column, cursor), the leases of each rate window by (key, cursor)."""
        jobs = self._limits_table("jobs")
        leases = self._limits_table("limit_leases")
        caps = request.caps or {}
        held_reads: list[tuple[str, Any]] = []
        rate_reads: list[tuple[str, Any]] = []
        for column in ("kind", "queue"):
            names = [lim.name for lim in limits if lim.scope == column]
            names += [k.partition(":")[2] for k in caps if k.startswith(f"{column}:")]
            if names:
                held_reads.append(
                    (
                        column,
                        conn.execute(
                            f"SELECT {column}, count(*) FROM {jobs} "
                            f"WHERE state IN ({state_list(request.held_states)}) "
                            f"AND ({column} = ANY(%s::text[])) IS TRUE GROUP BY {column}",
                            (names,),
                        ),
                    )
                )
        for lim in limits:
            start = window_start(lim, request.now)
            if start is not None:
                rate_reads.append(
                    (
                        lim.key,
                        conn.execute(
                            f"SELECT coalesce(sum(n), 0) FROM {leases} WHERE key = %s AND at > %s",
                            (lim.key, start),
                        ),
                    )
                )
        return held_reads, rate_reads

    def admit_counted(
        self, conn: Conn, request: ClaimRequest, counting: Counting
    ) -> tuple[ClaimRequest, list[Job]]:
        """Read the answers of `count_under_limits` (sent on `conn` in this transaction),
        read the clock again and let the budget admit; a further round fetches past a
        kind or queue the budget spent. Returns the retimed request and the pre-images
        to lease.

        The rate windows were counted from the time read before the lock: a window that
        starts earlier holds every lease the true one does, so the count is never
        short (a lease at the edge of the window may wait for the next claim)."""
        held, recent = counting.counts()
        budget = Budget.of(counting.limits, held, recent, request.caps)
        request, got = self._admit(conn, request, counting, counting.candidates(), budget)
        return request, got

    def admit_ahead(
        self, conn: Conn, request: ClaimRequest, counting: Counting, leased: dict[str, int]
    ) -> tuple[ClaimRequest, list[Job], Gate]:
        """Read the answers of `count_under_limits(..., locked=False)`, sent before the
        key locks with the limits and their running totals of leases (`leased`, read
        before the counts), read the clock again and let the budget admit, past the
        kinds and queues it holds back as `admit_counted` does. Returns the retimed
        request, the pre-images to lease and the gate their commit must pass under the
        key locks (`mark_leases`): only the limits of the jobs granted, so a kind held at
        its cap costs the claims of the other kinds no lock and no wait.

        Every job holding a slot at the time of these leases either held it at the
        count (counted) or was leased since (in the key's total when the gate runs): a
        lease is read after the count, so a job that left its slot before the count
        left it earlier. The rate windows hold the same argument (counted from the time
        read before the count, so never short). A key no job is granted under is not
        leased under, so its count needs no check: a job it held back stays queued.

        A claim that sent no count (`counting.cached`) leases within its handle's last
        counts (`Count`); when the totals just read leave one of them short of a whole
        claim, it counts now, in a round trip of its own, still ahead of the locks
        (the totals were read before it): a claim never leases fewer than it asked
        because an old count was short."""
        limits = counting.limits
        first = counting.candidates()
        kept: dict[str, Count] = {}
        budget: Budget | None = None
        if counting.cached:
            for lim in limits:
                count = self._counts.get(lim.key)
                if count is None or count.limit != lim:
                    break
                if count.room(leased.get(lim.key, 0)) < request.limit:
                    break
                kept[lim.key] = count
            else:  # every count kept still holds a whole claim at the totals just read
                budget = Budget({k: c.room(leased.get(k, 0)) for k, c in kept.items()})
        if budget is None:  # counted in the first round trip, or counted now
            if counting.cached:  # the counts kept are short of a whole claim
                with conn.pipeline():
                    reads = self.send_counts(conn, request, limits)
                held, recent = read_counts(*reads)
            else:
                held, recent = counting.counts()
            kept = {
                lim.key: Count(
                    lim,
                    leased.get(lim.key, 0),
                    allowance(lim, held.get(lim.key, 0), recent.get(lim.key, 0)),
                )
                for lim in limits
            }
            self._counts = kept
            budget = Budget.of(limits, held, recent, request.caps)
        request, got = self._admit(conn, request, counting, first, budget)
        granted = Counter(k for job in got for k in job_keys(job))
        under = [lim for lim in counting.limits if granted[lim.key]]
        gate = [kept[lim.key] for lim in under]
        return (
            request,
            got,
            Gate(under, [c.leased for c in gate], [c.allowance for c in gate]),
        )

    def _admit(
        self,
        conn: Conn,
        request: ClaimRequest,
        counting: Counting,
        first: list[Job],
        budget: Budget,
    ) -> tuple[ClaimRequest, list[Job]]:
        """Retime `request` and let `budget` admit (`claim_within`), starting from
        `first`, the candidates locked with the counts."""
        lock, params = counting.lock, counting.params
        prefetched: list[Job] | None = first
        if request.retime is not None:
            # The clock is read again after the count: a job that left its slot before
            # the count left it at an earlier time than these leases (the audit trail
            # never shows more holding a slot than the limit at any instant).
            request = request.retime()
        base = {**params, "now": request.now, "lease_until": request.lease_until}

        def fetch(
            wanted: int, taken: Sequence[str], blocked: Sequence[str], open_: tuple[str, ...]
        ) -> list[Job]:
            nonlocal prefetched
            if prefetched is not None:  # the first round: the rows locked with the counts
                rows, prefetched = prefetched, None
                # usable if the kinds they left out are still spent (else a kind with
                # room now was passed over) and they hold none the budget spent since
                if (
                    not taken
                    and set(counting.guess) <= set(blocked)
                    and all(j.kind not in blocked and j.queue in open_ for j in rows)
                ):
                    return rows[:wanted]
            values = {
                **base,
                "limit": wanted,
                "queues": list(open_),
                "queue": open_[0],
                "skip": [*params["skip"], *taken],
                "blocked": list(blocked),
            }
            return [job_from_values(r) for r in conn.execute(lock, values).fetchall()]

        got = claim_within(request, budget, fetch)
        self.spent_kinds = tuple(budget.blocked("kind"))
        return request, got

    def mark_leases(
        self,
        conn: Conn,
        limits: Sequence[Limit],
        jobs: Sequence[Job],
        now: float,
        gate: Gate | None = None,
    ) -> None:
        """Add the leases of `jobs` to the running totals of `limits` and to their rate
        windows, and now and then forget the leases that left a window (`EXPIRE_EVERY`)
        (same transaction, under the key locks: a claim counted ahead of them, `gate`,
        takes them here; no result is read, so it pipelines). With `gate`, the same
        statement fails the transaction (`GATE_CLOSED`) unless every limit of `gate`
        holds: unchanged since the count, and no more leases granted under its key
        since then, these included (the totals the bump returns), than the count left
        room for.

        The rows go as JSON documents, one parameter per part: a claim sends this on
        every lease under a limit, and an array parameter costs the driver several
        times what one text does (floats cross exactly: JSON numbers are their
        shortest round-trip text)."""
        if gate is not None and gate.limits:
            ids = sorted({lock_id(self.schema, lim.key) for lim in gate.limits})
            conn.execute(_LOCK_KEYS, (json.dumps(ids),))
        granted = Counter(k for job in jobs for k in job_keys(job))
        starts = {lim.key: window_start(lim, now) for lim in limits}  # None: no rate
        bumps = [[key, granted[key], start] for key, start in starts.items() if granted[key]]
        marks = Counter(rate_marks(limits, jobs, now))  # one row per key and time
        gated = gate is not None and bool(gate.limits)
        parts: list[str] = []
        params: list[Any] = []
        if bumps or gated:  # the keys' running totals, which claims counting ahead check
            parts.append(
                f"bumped AS (UPDATE {self._limits_table('limits')} AS l "
                "SET leased = l.leased + u.n "
                "FROM jsonb_to_recordset(%s::jsonb) AS u(key text, n int8, start float8) "
                "WHERE l.key = u.key "
                "RETURNING l.key, l.concurrency, l.rate, l.period, l.at, l.leased, u.n, u.start)"
            )
            params.append(_rows(("key", "n", "start"), bumps))
        leases = self._limits_table("limit_leases")
        if marks:
            # the leases that left the windows, now and then (`EXPIRE_EVERY`): the EXISTS
            # reads no row, so it is tested once, first; the keys and latest start bound
            # an index range (a join of rows to keys is planned as a scan of every key's)
            parts.append(
                f"expired AS (DELETE FROM {leases} AS l WHERE l.key = ANY "
                "(ARRAY(SELECT b.key FROM bumped AS b WHERE b.start IS NOT NULL)) "
                "AND l.at <= (SELECT max(b.start) FROM bumped AS b) "
                "AND l.at <= (SELECT b.start FROM bumped AS b WHERE b.key = l.key) "
                "AND EXISTS (SELECT FROM bumped AS c "
                f"WHERE c.leased / least(c.rate, {EXPIRE_EVERY}) "
                f"<> (c.leased - c.n) / least(c.rate, {EXPIRE_EVERY}) AND c.start IS NOT NULL))"
            )
            parts.append(
                f"marked AS (INSERT INTO {leases} (key, at, n) SELECT m.key, m.at, m.n "
                "FROM jsonb_to_recordset(%s::jsonb) AS m(key text, at float8, n int8))"
            )
            params.append(_rows(("key", "at", "n"), [[k, t, n] for (k, t), n in marks.items()]))
        if gate is None or not gate.limits:
            if parts:  # one statement: each part a data-modifying CTE, all of them run
                conn.execute(f"WITH {', '.join(parts)} SELECT 1", params)
            return
        # `bumped`: the rows as the bump left them; a key of the gate the bump did not
        # reach finds no row there, so the gate fails closed (counted again, locked)
        parts.append(
            "gate AS (SELECT count(*) AS n FROM jsonb_to_recordset(%s::jsonb) "
            "AS g(key text, concurrency int8, rate int8, period float8, at float8, "
            "leased int8, allowed int8) "
            "JOIN bumped AS l ON l.key = g.key "
            "AND (l.concurrency, l.rate, l.period, l.at) IS NOT DISTINCT FROM "
            "(g.concurrency, g.rate, g.period, g.at) "
            "AND l.leased >= g.leased AND l.leased - g.leased <= g.allowed)"
        )
        gated_rows = [
            [lim.key, lim.concurrency, lim.rate, lim.period, lim.at, leased, allowed]
            for lim, leased, allowed in zip(gate.limits, gate.leased, gate.allowance, strict=True)
        ]
        fields = ("key", "concurrency", "rate", "period", "at", "leased", "allowed")
        # gate.n is no constant: the failing branch runs only when taken
        conn.execute(
            f"WITH {', '.join(parts)} SELECT CASE WHEN gate.n <> %s "
            f"THEN ('{GATE_CLOSED} ' || gate.n)::int ELSE 0 END FROM gate",
            [*params, _rows(fields, gated_rows), len(gate.limits)],
        )


def _rows(fields: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`rows` as the JSON document `jsonb_to_recordset` reads with `fields`."""
    return json.dumps([dict(zip(fields, row, strict=True)) for row in rows])


def applicable_rows(rows: Sequence[Sequence[Any]], request: ClaimRequest) -> list[Limit]:
    """The limits (rows of `limits`) a claim must respect."""
    return applicable({r[0]: limit_from_row(r) for r in rows}, request.queues, request.kinds)
