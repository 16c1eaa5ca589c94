"""`JobBrowser` for PostgreSQL: the dashboard's filtered, keyset-paged job list, the
transition counts and the newest entries of some events in a recent window.

Speed with millions of finished rows rests on indexes: the primary key (id order
and id-prefix search), `jobs_state` (rare states), `jobs_idempotency_key`, and
migration 2's `jobs_correlation` and the BRIN index `job_events_at` (a recent
window of the audit trail reads only its last blocks).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
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
from .._rows import job_from_values
from . import migrations
from .params import entry_of


class PostgresBrowse:
    """Mixed into PostgresStore (it reads through the store's pooled connections)."""

    schema: str

    def connection(self, what: str) -> AbstractContextManager[Any]:
        raise NotImplementedError  # provided by PostgresStore

    def list_jobs(self, request: ListRequest) -> JobPage:
        sql, params = list_sql(request, "%s", f"{migrations.quote(self.schema)}.jobs")
        with self.connection("list jobs") as conn:
            rows = conn.execute(sql, params).fetchall()
        return page_of([job_from_values(r) for r in rows], request)

    def recent_transitions(self, since: float) -> list[TransitionCount]:
        sql = (
            "SELECT from_state, event, to_state, outcome, count(*) "
            f"FROM {migrations.quote(self.schema)}.job_events WHERE at >= %s "
            "GROUP BY from_state, event, to_state, outcome"
        )
        with self.connection("recent transitions") as conn:
            rows: Iterator[Any] = conn.execute(sql, (since,)).fetchall()
        return [TransitionCount(r[0], r[1], r[2], r[3], int(r[4])) for r in rows]

    def recent_entries(self, request: RecentRequest) -> list[AuditEntry]:
        sql, params = recent_sql(request, "%s", f"{migrations.quote(self.schema)}.job_events")
        with self.connection("recent entries") as conn:
            rows = conn.execute(sql, params).fetchall()
        return [entry_of(r[1:]) for r in rows]

    def trail_page(self, request: TrailRequest) -> TrailPage:
        table = f"{migrations.quote(self.schema)}.job_events"
        sql, params = trail_sql(request, "%s", table)
        with self.connection("trail page") as conn:
            rows = conn.execute(sql, params).fetchall()
        shown = list(rows[: request.limit])
        shown.reverse()
        older = int(shown[0][0]) if len(rows) > request.limit and shown else None
        return TrailPage(tuple(entry_of(r[1:]) for r in shown), older)

    def oldest_jobs(self, state: str, queues: tuple[str, ...]) -> dict[str, Job]:
        if not check_queues(queues):
            return {}
        sql, params = oldest_sql(state, queues, "%s", f"{migrations.quote(self.schema)}.jobs")
        with self.connection("oldest jobs") as conn:
            rows = conn.execute(sql, params).fetchall()
        return {job.queue: job for job in map(job_from_values, rows)}
