"""The `History` port's two grouped queries, for SQLite and PostgreSQL (placeholders and
the few dialect differences passed in): counts of applied audit entries per (bucket,
queue, kind, event, to_state), and the queue latency of first leases per (bucket, queue,
kind). Both read only the window's entries (the caller bounds it) joined to their job,
each entry's job found by its id (never a pass over the whole jobs table)."""

from __future__ import annotations

from typing import Any

import attrs

from fsm.ports import EventCount, HistoryRequest, LatencyCount
from fsm.ports.history import MAX_ROWS


@attrs.frozen
class Dialect:
    """What differs between the SQL stores: the placeholder `p`, the tables, the integer
    bucket of `e.at` (two placeholders: since, width), an extra WHERE condition on the
    window's first row (or ''), the submitted run_after read from the creation entry
    `s`'s data, the two-argument maximum (MAX or GREATEST), and `job_of`: how the window's
    entries `e` join their job `j` (queue and kind) by its primary key."""

    p: str
    events: str
    jobs: str
    bucket: str
    start: str
    run_after: str
    greatest: str
    job_of: str


def events_sql(request: HistoryRequest, d: Dialect) -> tuple[str, list[Any]]:
    p = d.p
    sql = (
        f"SELECT {d.bucket} AS b, j.queue, j.kind, e.event, e.to_state, COUNT(*) AS n "
        f"FROM {d.events} e {d.job_of} "
        f"WHERE {d.start}e.at >= {p} AND e.at < {p} AND e.outcome = 'applied' "
        "GROUP BY 1, j.queue, j.kind, e.event, e.to_state ORDER BY n DESC "
        f"LIMIT {p}"
    )
    return sql, [request.since, request.bucket, request.since, request.until, MAX_ROWS + 1]


def latency_sql(request: HistoryRequest, d: Dialect) -> tuple[str, list[Any]]:
    p = d.p
    wait = f"{d.greatest}(e.at - {d.run_after}, 0)"
    sql = (
        f"SELECT {d.bucket} AS b, j.queue, j.kind, COUNT(*) AS n, SUM({wait}), MAX({wait}) "
        f"FROM {d.events} e {d.job_of} "
        f"JOIN {d.events} s ON s.job_id = e.job_id AND s.seq = "
        f"(SELECT MIN(s2.seq) FROM {d.events} s2 WHERE s2.job_id = e.job_id) "
        f"WHERE {d.start}e.at >= {p} AND e.at < {p} AND e.outcome = 'applied' "
        f"AND e.event = {p} AND e.fence = 1 "
        f"GROUP BY 1, j.queue, j.kind ORDER BY n DESC LIMIT {p}"
    )
    params = [
        request.since,
        request.bucket,
        request.since,
        request.until,
        request.lease_event,
        MAX_ROWS + 1,
    ]
    return sql, params


def event_rows(rows: list[Any]) -> list[EventCount]:
    return [EventCount(int(r[0]), r[1], r[2], r[3], r[4], int(r[5])) for r in rows]


def latency_rows(rows: list[Any]) -> list[LatencyCount]:
    return [
        LatencyCount(int(r[0]), r[1], r[2], int(r[3]), float(r[4] or 0), float(r[5] or 0))
        for r in rows
    ]
