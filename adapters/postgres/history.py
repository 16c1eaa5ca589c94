"""`History` for PostgreSQL: two grouped queries over the window, which the BRIN index
on the audit trail's time (`job_events_at`) keeps to the window's blocks."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from fsm.ports import HistoryCounts, HistoryRequest
from fsm.ports.history import cut

from .._history import Dialect, event_rows, events_sql, latency_rows, latency_sql
from . import migrations

_BUCKET = "floor((e.at - %s) / %s)::int"
_RUN_AFTER = "(s.data_json::jsonb ->> 'run_after')::float8"


class PostgresHistory:
    """Mixed into PostgresStore (reads through the store's pooled connections)."""

    schema: str

    def connection(self, what: str) -> AbstractContextManager[Any]:
        raise NotImplementedError  # provided by PostgresStore

    def history_counts(self, request: HistoryRequest) -> HistoryCounts:
        s = migrations.quote(self.schema)
        d = Dialect("%s", f"{s}.job_events", f"{s}.jobs", _BUCKET, "", _RUN_AFTER, "GREATEST")
        with self.connection("history counts") as conn:
            sql, params = events_sql(request, d)
            events = event_rows(conn.execute(sql, params).fetchall())
            sql, params = latency_sql(request, d)
            latency = latency_rows(conn.execute(sql, params).fetchall())
        return cut(events, latency)
