"""`History` for SQLite: the window's first audit row found by the binary search the
browser uses (`SqliteBrowse._first_seq_at`), then two grouped queries over the window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsm.ports import HistoryCounts, HistoryRequest
from fsm.ports.history import cut

from .._history import Dialect, event_rows, events_sql, latency_rows, latency_sql

_BUCKET = "CAST((e.at - ?) / ? AS INTEGER)"
_RUN_AFTER = "json_extract(s.data_json, '$.run_after')"


class SqliteHistory:
    """Mixed into SqliteStore (reads through the store's own `_read`)."""

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def _first_seq_at(self, since: float) -> int:
        raise NotImplementedError  # provided by SqliteBrowse

    def history_counts(self, request: HistoryRequest) -> HistoryCounts:
        first = self._first_seq_at(request.since)
        start = f"e.seq >= {int(first)} AND "
        job_of = "JOIN jobs j ON j.id = e.job_id"  # SQLite's join probes the primary key
        d = Dialect("?", "job_events", "jobs", _BUCKET, start, _RUN_AFTER, "MAX", job_of)
        sql, params = events_sql(request, d)
        events = event_rows(self._read("history counts", sql, params))
        sql, params = latency_sql(request, d)
        latency = latency_rows(self._read("history latency", sql, params))
        return cut(events, latency)
