"""`JobBrowser` and `BoundedReads` for SQLite: the dashboard's filtered, keyset-paged job
list, the transition counts of a recent window, trail pages and oldest jobs per queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsm.ports import (
    JobPage,
    ListRequest,
    RecentRequest,
    TrailPage,
    TrailRequest,
    TransitionCount,
    check_queues,
    page_of,
)
from fsm.records import AuditEntry, Job

from .._browse import list_sql, oldest_sql, recent_sql, trail_sql
from ..rows import job_from_values

#: rows the binary search for a window's first audit row may probe (log2 of 2**40 rows)
_PROBES = 40


class SqliteBrowse:
    """Mixed into SqliteStore (it reads through the store's own `_read`)."""

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def list_jobs(self, request: ListRequest) -> JobPage:
        sql, params = list_sql(request)
        rows = self._read("list jobs", sql, params)
        return page_of([job_from_values(r) for r in rows], request)

    def _first_seq_at(self, since: float) -> int:
        """The first audit row (by seq, the write order) written at or after `since`.

        Rows are appended in time order, so a binary search over seq finds the
        window's start in a few indexed probes instead of a scan of the trail.
        Entries are stamped by their writers' clocks: one written just after a
        later-stamped one (clock skew between processes) may fall outside.
        """
        (top,) = self._read("audit window", "SELECT COALESCE(MAX(seq), 0) FROM job_events")[0]
        lo, hi = 1, int(top) + 1
        for _ in range(_PROBES):
            if lo >= hi:
                break
            mid = (lo + hi) // 2
            row = self._read(
                "audit window", "SELECT seq, at FROM job_events WHERE seq >= ? LIMIT 1", (mid,)
            )
            if not row or row[0][1] >= since:
                hi = mid
            else:
                lo = int(row[0][0]) + 1
        return lo

    def recent_transitions(self, since: float) -> list[TransitionCount]:
        start = self._first_seq_at(since)
        rows = self._read(
            "recent transitions",
            "SELECT from_state, event, to_state, outcome, COUNT(*) FROM job_events "
            "WHERE seq >= ? AND at >= ? GROUP BY from_state, event, to_state, outcome",
            (start, since),
        )
        return [TransitionCount(r[0], r[1], r[2], r[3], int(r[4])) for r in rows]

    def recent_entries(self, request: RecentRequest) -> list[AuditEntry]:
        start = self._first_seq_at(request.since)
        sql, params = recent_sql(request, first_seq=True)
        rows = self._read("recent entries", sql, [start, *params])
        return [AuditEntry(*r[1:]) for r in rows]

    def trail_page(self, request: TrailRequest) -> TrailPage:
        sql, params = trail_sql(request)
        rows = self._read("trail page", sql, params)
        return _trail_of(rows, request)

    def oldest_jobs(self, state: str, queues: tuple[str, ...]) -> dict[str, Job]:
        if not check_queues(queues):
            return {}
        sql, params = oldest_sql(state, queues)
        return {
            job.queue: job for job in map(job_from_values, self._read("oldest jobs", sql, params))
        }


def _trail_of(rows: Sequence[Any], request: TrailRequest) -> TrailPage:
    """A page from up to `limit + 1` rows (seq first), newest first."""
    shown = list(rows[: request.limit])
    shown.reverse()
    older = int(shown[0][0]) if len(rows) > request.limit and shown else None
    return TrailPage(tuple(AuditEntry(*r[1:]) for r in shown), older)
