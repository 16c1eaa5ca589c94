"""Raw store baselines: the physical limit of a job lifecycle with no engine.

One lifecycle is three transactions on one table: insert a queued row; claim the
oldest queued row (`UPDATE ... RETURNING`); mark it done. No audit rows, no payload
beyond a small JSON text, no engine code: what the driver and the database cost.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from benchmarks.services import fresh_database

SQLITE_SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';
"""

SQLITE_CLAIM = (
    "UPDATE jobs SET state = 'running' WHERE id = "
    "(SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1) RETURNING id"
)


def sqlite_lifecycles(path: Path, synchronous: str, jobs: int) -> float:
    """Lifecycles/s on one sqlite3 connection, WAL, `synchronous` = FULL or NORMAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.executescript(SQLITE_SCHEMA)
        started = time.perf_counter()
        for i in range(jobs):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO jobs (state, payload, created_at) VALUES ('queued', ?, ?)",
                (f'{{"i": {i}}}', time.time()),
            )
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            (job_id,) = conn.execute(SQLITE_CLAIM).fetchone()
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE jobs SET state = 'done', finished_at = ? WHERE id = ?",
                (time.time(), job_id),
            )
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        (done,) = conn.execute("SELECT count(*) FROM jobs WHERE state = 'done'").fetchone()
    finally:
        conn.close()
    if done != jobs:
        raise RuntimeError(f"benchmark: raw sqlite finished {done} of {jobs} jobs")
    return jobs / elapsed


PG_SCHEMA = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    state text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';
"""

PG_CLAIM = (
    "UPDATE jobs SET state = 'running' WHERE id = "
    "(SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING id"
)


def postgres_lifecycles(jobs: int, clients: int) -> float:
    """Total lifecycles/s of `clients` threads, each with its own psycopg connection.

    Each thread runs its share of lifecycles: insert, claim (the oldest queued row,
    FOR UPDATE SKIP LOCKED: possibly another thread's), complete; three transactions.
    """
    import psycopg
    from psycopg.types.json import Jsonb

    with fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(PG_SCHEMA)
        conns = [psycopg.connect(url, autocommit=True) for _ in range(clients)]
        errors: list[BaseException] = []
        gate = threading.Barrier(clients + 1)

        def client(conn: psycopg.Connection[tuple[object, ...]], share: range) -> None:
            try:
                gate.wait()
                for i in share:
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO jobs (state, payload) VALUES ('queued', %s)",
                            (Jsonb({"i": i}),),
                        )
                    row = None
                    while row is None:  # every row SKIP LOCKED saw was being claimed
                        with conn.transaction():
                            row = conn.execute(PG_CLAIM).fetchone()
                    with conn.transaction():
                        conn.execute(
                            "UPDATE jobs SET state = 'done', finished_at = now() WHERE id = %s",
                            (row[0],),
                        )
            except BaseException as err:  # reported by the caller
                errors.append(err)

        threads = [
            threading.Thread(target=client, args=(conn, range(n, jobs, clients)))
            for n, conn in enumerate(conns)
        ]
        try:
            for thread in threads:
                thread.start()
            gate.wait(60)
            started = time.perf_counter()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            if errors:
                raise RuntimeError("benchmark: raw postgres client failed") from errors[0]
            with conns[0].transaction():
                (done,) = conns[0].execute(
                    "SELECT count(*) FROM jobs WHERE state = 'done'"
                ).fetchone() or (0,)
        finally:
            for conn in conns:
                conn.close()
    if done != jobs:
        raise RuntimeError(f"benchmark: raw postgres finished {done} of {jobs} jobs")
    return jobs / elapsed
