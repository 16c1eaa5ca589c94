"""Tables full of finished jobs, written straight into a store's tables: set-up only.

The scale suite, the store benchmarks and the dashboard benchmark measure jobfsm next
to many succeeded jobs; writing them through the engine would take hours, so these
write the rows a finished job leaves (its job row and its four audit rows: submit,
lease, start, succeed) with the driver, on a connection of their own, into a store
the engine has migrated.
"""

from __future__ import annotations

import sqlite3
import time

from adapters.sqlite import parse_url
from benchmarks.rows import audit_values, inserts, job_values
from fsm.records import AuditEntry, Job, new_id

#: the finished rows of a PostgreSQL fill span this many days, oldest first
FILL_DAYS = 70.0
#: the four transitions of a succeeded job: (event, from, to)
STEPS = (
    ("submit", None, "queued"),
    ("lease", "queued", "leased"),
    ("start", "leased", "running"),
    ("succeed", "running", "succeeded"),
)


def finished_sqlite(url: str, n: int, now: float, queue: str = "default") -> None:
    """`n` succeeded jobs (4 audit rows each) in the SQLite store at `url`, a day old."""
    add_job, add_audit = inserts("?")
    conn = sqlite3.connect(parse_url(url).path, isolation_level=None, timeout=60)
    try:
        chunk = 20_000
        for base in range(0, n, chunk):
            rows, events = [], []
            for i in range(base, min(n, base + chunk)):
                t = now - 86400 + i * 1e-3
                job = Job(
                    new_id(t), "bench", queue, "{}", "succeeded", t, t, t,
                    attempt=1, fence=1, version=4, started_at=t, finished_at=t, result_json="null",
                )  # fmt: skip
                rows.append(job_values(job))
                for v, (ev, a, b) in enumerate(STEPS, start=1):
                    e = AuditEntry(job.id, v, t, ev, a, b, 1 if v > 1 else 0, 1 if v > 2 else 0)
                    events.append(audit_values(e))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(add_job, rows)
            conn.executemany(add_audit, events)
            conn.execute("COMMIT")
    finally:
        conn.close()


def finished_postgres(
    db: str, schema: str, n: int, queue: str = "default", *, days: float = FILL_DAYS
) -> None:
    """`n` succeeded jobs (4 audit rows each) written straight into `schema` of `db`.

    Written on the server by INSERT ... SELECT over generate_series, no row crosses the
    wire. Job g (1..n) finished `days * (n - g) / n` days ago: the oldest first, in
    insertion order, as a live queue leaves them, so a retention prune (7 days for
    succeeded jobs by default) finds most of the table past it (9/10 at 70 days).
    """
    import psycopg

    now = time.time()
    span = days * 86400.0
    # t: when job g finished; it was submitted and leased 2 s before, started 1 s before
    spread = (
        "SELECT g, '0' || lpad(g::text, 25, '0') AS id, "
        "%(now)s - %(span)s * (%(n)s - g)::float8 / %(n)s AS t "
        "FROM generate_series(1, %(n)s) AS g"
    )
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("SET maintenance_work_mem = '512MB'")
        params = {"now": now, "span": span, "n": n, "queue": queue}
        conn.execute(
            "INSERT INTO jobs (id, kind, queue, payload_json, state, created_at, updated_at, "
            "run_after, priority, attempt, max_attempts, recoveries, max_recoveries, retry_safe, "
            "fence, version, started_at, finished_at, correlation_id, result_json) "
            "SELECT id, 'bench', %(queue)s, '{}', 'succeeded', t - 2, t, t - 2, 0, 1, 10, 0, 3, "
            f"true, 1, 4, t - 1, t, g::text, 'null' FROM ({spread}) AS s",
            params,
        )
        conn.execute(
            "INSERT INTO job_events (job_id, version, at, event, from_state, to_state, fence, "
            "attempt, outcome, data_json) "
            "SELECT id, v, t - (ARRAY[2, 2, 1, 0])[v], "
            "(ARRAY['submit','lease','start','succeed'])[v], "
            "(ARRAY[NULL,'queued','leased','running'])[v], "
            "(ARRAY['queued','leased','running','succeeded'])[v], "
            "(ARRAY[0, 1, 1, 1])[v], (ARRAY[0, 0, 1, 1])[v], 'applied', '{}' "
            f"FROM ({spread}) AS s CROSS JOIN LATERAL generate_series(1, 4) AS v",
            params,
        )
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("VACUUM ANALYZE job_events")
        # flush the bulk load now, so its checkpoint I/O does not land in the timed claims
        conn.execute("CHECKPOINT")
