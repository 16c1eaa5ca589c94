"""`fsm.ports.LimitsClaims` for SQLite: the `limits`, `limit_changes` and `limit_leases`
tables and the `jobs_held` index of migration 9 (docs/flow-control.md).

The claim counts under its `BEGIN IMMEDIATE` (every writer of the file waits for it),
so no interleaving of claimers can lease past a limit."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from fsm.lifecycle.limits import Budget, Limit, LimitChange, applicable, window_start
from fsm.ports import ClaimRequest
from fsm.records import Job

from ..claiming import claim_within, rate_marks
from ..rows import LIMIT_COLUMNS as _COLUMNS
from ..rows import LIMIT_FIELDS, job_from_values, limit_from_row, limit_to_row
from .schema import in_list

_MARKS = ", ".join("?" for _ in LIMIT_FIELDS)
_CHANGE = "seq, key, at, actor, reason, origin, before, after"


def _marks(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


class SqliteLimits:
    """Mixed into SqliteStore (it writes through the store's `_write`)."""

    def _write(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by SqliteStore

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def _changed(
        self,
        conn: sqlite3.Connection,
        key: str,
        before: Limit | None,
        after: Limit | None,
        by: Limit,
    ) -> None:
        conn.execute(
            "INSERT INTO limit_changes (key, at, actor, reason, origin, before, after) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
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
        with self._write("set limit") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM limits WHERE key = ?", (limit.key,))
            found = rows.fetchall()
            before = limit_from_row(found[0]) if found else None
            conn.execute(
                f"INSERT OR REPLACE INTO limits ({_COLUMNS}) VALUES ({_MARKS})",
                limit_to_row(limit),
            )
            self._changed(conn, limit.key, before, limit, limit)
        return before

    def clear_limit(self, key: str, *, actor: str, reason: str, at: float) -> Limit | None:
        with self._write("clear limit") as conn:
            found = conn.execute(f"SELECT {_COLUMNS} FROM limits WHERE key = ?", (key,)).fetchall()
            if not found:
                return None
            before = limit_from_row(found[0])
            conn.execute("DELETE FROM limits WHERE key = ?", (key,))
            conn.execute("DELETE FROM limit_leases WHERE key = ?", (key,))
            by = Limit(key, actor=actor, reason=reason, at=at)
            self._changed(conn, key, before, None, by)
        return before

    def limits(self) -> dict[str, Limit]:
        rows = self._read("limits", f"SELECT {_COLUMNS} FROM limits")
        return {r[0]: limit_from_row(r) for r in rows}

    def limit_changes(self, key: str | None = None, limit: int = 100) -> list[LimitChange]:
        where, params = ("WHERE key = ?", [key]) if key is not None else ("", [])
        rows = self._read(
            "limit changes",
            f"SELECT {_CHANGE} FROM limit_changes {where} ORDER BY seq DESC LIMIT ?",
            [*params, max(0, limit)],
        )
        return [LimitChange(*r) for r in rows]

    def limit_usage(
        self, keys: Sequence[str], held: tuple[str, ...], waiting: tuple[str, ...]
    ) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for key in keys:
            scope, _, name = key.partition(":")
            column = "kind" if scope == "kind" else "queue"
            counts = [
                self._read(
                    "limit usage",
                    f"SELECT count(*) FROM jobs WHERE state IN {in_list(states)} AND {column} = ?",
                    (name,),
                )[0][0]
                for states in (held, waiting)
            ]
            out[key] = (int(counts[0]), int(counts[1]))
        return out

    def _claim_limited(
        self,
        conn: sqlite3.Connection,
        request: ClaimRequest,
        select: str,
        params: Sequence[Any],
        skip: Sequence[str],
    ) -> tuple[list[Job], list[Limit]] | None:
        """The pre-images a claim under limits may lease (inside its transaction), and
        the limits that applied; None when no limit applies (the plain claim)."""
        rows = conn.execute(f"SELECT {_COLUMNS} FROM limits").fetchall()
        limits = applicable({r[0]: limit_from_row(r) for r in rows}, request.queues, request.kinds)
        if not limits and not request.caps:
            return None
        held_in = in_list(request.held_states)
        held: dict[str, int] = {}
        kinds = [lim.name for lim in limits if lim.scope == "kind"]
        kinds += [k.partition(":")[2] for k in (request.caps or {}) if k.startswith("kind:")]
        queues = [lim.name for lim in limits if lim.scope == "queue"]
        queues += [k.partition(":")[2] for k in (request.caps or {}) if k.startswith("queue:")]
        for column, names in (("kind", kinds), ("queue", queues)):
            if names:
                for name, n in conn.execute(
                    f"SELECT {column}, count(*) FROM jobs WHERE state IN {held_in} "
                    f"AND {column} IN ({_marks(names)}) GROUP BY {column}",
                    names,
                ):
                    held[f"{column}:{name}"] = int(n)
        recent: dict[str, int] = {}
        for lim in limits:
            start = window_start(lim, request.now)
            if start is not None:
                conn.execute("DELETE FROM limit_leases WHERE key = ? AND at <= ?", (lim.key, start))
                (n,) = conn.execute(
                    "SELECT count(*) FROM limit_leases WHERE key = ? AND at > ?", (lim.key, start)
                ).fetchone()
                recent[lim.key] = int(n)
        budget = Budget.of(limits, held, recent, request.caps)
        head, tail = select.split("ORDER BY", 1)

        def fetch(
            wanted: int, taken: Sequence[str], blocked: Sequence[str], open_: tuple[str, ...]
        ) -> list[Job]:
            out = [*skip, *taken]
            sql = head.replace(
                f"queue IN ({_marks(request.queues)})", f"queue IN ({_marks(open_)})", 1
            )
            extra: list[Any] = []
            if out:
                sql += f"AND id NOT IN ({_marks(out)}) "
                extra += out
            if blocked:
                sql += f"AND kind NOT IN ({_marks(blocked)}) "
                extra += blocked
            n = len(request.queues)
            values = [*open_, *params[n:-1], *extra, wanted]
            return [job_from_values(r) for r in conn.execute(sql + "ORDER BY" + tail, values)]

        return claim_within(request, budget, fetch), limits

    def _mark_leases(
        self, conn: sqlite3.Connection, limits: Sequence[Limit], jobs: Sequence[Job], now: float
    ) -> None:
        marks = rate_marks(limits, jobs, now)
        if marks:
            conn.executemany("INSERT INTO limit_leases (key, at) VALUES (?, ?)", marks)
