"""`History` for PostgreSQL: two grouped queries over the window, which the BRIN index
on the audit trail's time (`job_events_at`) keeps to the window's blocks.

Two things keep a day's window fast on a large table (docs/dashboard.md, 1,000,000
jobs): each entry's job is looked up by its primary key in a LATERAL subquery that the
planner cannot flatten (`OFFSET 0`), where a plain join let it hash the whole jobs table
(spilled to disk); and the reads run with `jit = off` in their own transaction, as the
plan's cost estimate, high for a table of that size, made PostgreSQL compile it for
longer than the query then ran (100-900 ms of JIT for 150-450 ms of work)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from fsm.ports import HistoryCounts, HistoryRequest
from fsm.ports.history import cut

from .._history import Dialect, event_rows, events_sql, latency_rows, latency_sql
from . import migrations

_BUCKET = "floor((e.at - %s) / %s)::int"
_RUN_AFTER = "(s.data_json::jsonb ->> 'run_after')::float8"
_JOB_OF = "CROSS JOIN LATERAL (SELECT queue, kind FROM {jobs} j WHERE j.id = e.job_id OFFSET 0) j"


class PostgresHistory:
    """Mixed into PostgresStore (reads through the store's pooled connections)."""

    schema: str

    def connection(self, what: str) -> AbstractContextManager[Any]:
        raise NotImplementedError  # provided by PostgresStore

    def history_counts(self, request: HistoryRequest) -> HistoryCounts:
        s = migrations.quote(self.schema)
        jobs = f"{s}.jobs"
        job_of = _JOB_OF.format(jobs=jobs)
        d = Dialect("%s", f"{s}.job_events", jobs, _BUCKET, "", _RUN_AFTER, "GREATEST", job_of)
        with self.connection("history counts") as conn, conn.transaction():
            conn.execute("SET LOCAL jit = off")
            sql, params = events_sql(request, d)
            events = event_rows(conn.execute(sql, params).fetchall())
            sql, params = latency_sql(request, d)
            latency = latency_rows(conn.execute(sql, params).fetchall())
        return cut(events, latency)
