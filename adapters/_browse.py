"""The statements shared by the SQL stores' `JobBrowser` and `BoundedReads` implementations."""

from __future__ import annotations

from typing import Any

from fsm.ports import ListRequest, RecentRequest, TrailRequest

from .rows import AUDIT_COLUMNS, JOB_COLUMNS

_JOB_COLS = ", ".join(JOB_COLUMNS)
_AUDIT_COLS = ", ".join(AUDIT_COLUMNS)
#: ids sort below this character (they are ASCII letters and digits): the upper bound
#: of an id-prefix range
_ID_END = "\x7f"


def list_sql(request: ListRequest, mark: str = "?", table: str = "jobs") -> tuple[str, list[Any]]:
    """The statement and parameters of one page (`limit + 1` rows), for SQLite and
    PostgreSQL alike (`mark` is the parameter placeholder, `table` the jobs table).

    A text search is a UNION of three lookups that each have an index of their
    own (id range, idempotency key, correlation id); each is cut to the page size
    before they are merged, so no lookup walks the whole table.
    """
    order = "ASC" if request.oldest_first else "DESC"
    where: list[str] = []
    params: list[Any] = []
    for column, wanted in (
        ("state", request.states),
        ("kind", request.kinds),
        ("queue", request.queues),
    ):
        if wanted is not None:
            where.append(f"{column} IN ({', '.join(mark for _ in wanted)})" if wanted else "0 = 1")
            params.extend(wanted)
    if request.after is not None:
        where.append(f"id {'>' if request.oldest_first else '<'} {mark}")
        params.append(request.after)
    limit = request.limit + 1
    if request.text is None:
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {_JOB_COLS} FROM {table}{clause} ORDER BY id {order} LIMIT {mark}"
        return sql, [*params, limit]
    parts: list[str] = []
    all_params: list[Any] = []
    lookups: list[tuple[str, list[Any]]] = [
        (f"idempotency_key = {mark}", [request.text]),
        (f"correlation_id = {mark}", [request.text]),
    ]
    prefix = request.id_prefix
    if prefix is not None:
        lookups.insert(0, (f"id >= {mark} AND id < {mark}", [prefix, prefix + _ID_END]))
    for cond, cond_params in lookups:
        clause = " AND ".join([cond, *where])
        parts.append(
            f"SELECT * FROM (SELECT {_JOB_COLS} FROM {table} WHERE {clause} "
            f"ORDER BY id {order} LIMIT {mark}) AS hit"
        )
        all_params += [*cond_params, *params, limit]
    # UNION (not ALL): a job found by two lookups is listed once
    sql = f"SELECT * FROM ({' UNION '.join(parts)}) AS hits ORDER BY id {order} LIMIT {mark}"
    return sql, [*all_params, limit]


def trail_sql(
    request: TrailRequest, mark: str = "?", table: str = "job_events"
) -> tuple[str, list[Any]]:
    """One trail page: `seq` and the entry's columns of up to `limit + 1` entries, newest
    first, through the (job_id, seq) key: the cost follows the page, not the trail."""
    where = f"job_id = {mark}"
    params: list[Any] = [request.job_id]
    if request.before is not None:
        where += f" AND seq < {mark}"
        params.append(request.before)
    sql = f"SELECT seq, {_AUDIT_COLS} FROM {table} WHERE {where} ORDER BY seq DESC LIMIT {mark}"
    return sql, [*params, request.limit + 1]


def recent_sql(
    request: RecentRequest, mark: str = "?", table: str = "job_events", first_seq: bool = False
) -> tuple[str, list[Any]]:
    """`seq` and the entry's columns of the newest `limit` applied entries of the events
    in the window. With `first_seq` the statement takes one more parameter first, the
    window's first seq (SQLite finds it by binary search and reads backwards on its
    rowid from the newest entry); without it, `at >= since` alone bounds the read (the
    BRIN index on `at` in PostgreSQL)."""
    names = ", ".join(mark for _ in request.events)
    where = f"at >= {mark} AND event IN ({names}) AND outcome = 'applied'"
    if first_seq:
        where = f"seq >= {mark} AND {where}"
    order = "seq DESC" if first_seq else "at DESC, seq DESC"
    sql = f"SELECT seq, {_AUDIT_COLS} FROM {table} WHERE {where} ORDER BY {order} LIMIT {mark}"
    return sql, [request.since, *request.events, request.limit]


def oldest_sql(
    state: str, queues: tuple[str, ...], mark: str = "?", table: str = "jobs"
) -> tuple[str, list[Any]]:
    """The oldest job (lowest id: ids are time-ordered) in `state` of each of `queues`, in
    one grouped statement."""
    names = ", ".join(mark for _ in queues)
    sql = (
        f"SELECT {_JOB_COLS} FROM {table} WHERE id IN (SELECT MIN(id) FROM {table} "
        f"WHERE state = {mark} AND queue IN ({names}) GROUP BY queue)"
    )
    return sql, [state, *queues]
