"""SqliteStore: the Store port on one SQLite file, safe for threads and processes."""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fsm.errors import SchemaError, StoreError, TransientStoreError, VersionConflict
from fsm.ports import ClaimRequest, PruneRequest, RenewRequest, ScanRequest
from fsm.records import AuditEntry, Decision, Job, Owner

from .._rows import AUDIT_COLUMNS, JOB_COLUMNS, job_from_values, owner_to_text
from .schema import (
    ACTIVE_STATES,
    CREATE_VERSION_TABLE,
    LEASED_STATES,
    MIGRATIONS,
    SCHEMA_VERSION,
    in_list,
)
from .url import SqliteOptions, parse_url

log = logging.getLogger(__name__)

_JOB_COLS = ", ".join(JOB_COLUMNS)
_JOB_MARKS = ", ".join("?" for _ in JOB_COLUMNS)
_AUDIT_COLS = ", ".join(AUDIT_COLUMNS)
_AUDIT_MARKS = ", ".join("?" for _ in AUDIT_COLUMNS)
_DECIDED_COLS = tuple(c for c in JOB_COLUMNS if c != "id")
#: rows per multi-row statement: 29 bound values a row stays under SQLite's
#: default limit of 32766 variables.
_CHUNK = 500
_TRANSIENT = ("locked", "busy")
_SCHEMA = ("no such table", "no such column", "has no column")


_OWNER_AT = JOB_COLUMNS.index("owner")
_VERSION_AT = JOB_COLUMNS.index("version")


@functools.lru_cache(maxsize=1024)
def _owner_text(owner: Owner) -> str | None:
    return owner_to_text(owner)


def _job(row: Sequence[Any]) -> Job:
    """A Job from a row selected as `_JOB_COLS` (the `_rows` mapping, positionally)."""
    return job_from_values(row)


def _job_values(job: Job) -> list[Any]:
    """The row of `job` in `JOB_COLUMNS` order (as `_rows.job_to_row` maps it)."""
    values = [getattr(job, c) for c in JOB_COLUMNS]
    if job.owner is not None:
        values[_OWNER_AT] = _owner_text(job.owner)
    return values


@functools.lru_cache(maxsize=256)  # bounded: a transition changes one of a few column sets
def _update_sql(columns: tuple[str, ...]) -> str:
    sets = ", ".join(f"{c} = ?" for c in columns)
    return f"UPDATE jobs SET {sets} WHERE id = ? AND version = ?"


def _cas_update(conn: sqlite3.Connection, d: Decision) -> bool:
    """Write `d.job` over `d.previous` if the stored version is still the previous one.

    Only the columns the decision changed are set: every write bumps `version`,
    so a row at `d.previous.version` holds exactly `d.previous`, and setting the
    changed columns leaves the row equal to `d.job`. (Setting every column would
    rewrite every index entry of the row, unchanged or not.)
    """
    assert d.previous is not None
    new, old = _job_values(d.job), _job_values(d.previous)
    changed = [i for i in range(1, len(new)) if new[i] != old[i] or i == _VERSION_AT]
    columns = tuple(JOB_COLUMNS[i] for i in changed)
    values = [new[i] for i in changed]
    cur = conn.execute(_update_sql(columns), [*values, d.job.id, d.previous.version])
    return cur.rowcount == 1


def _audit_values(entry: AuditEntry) -> list[Any]:
    return [getattr(entry, c) for c in AUDIT_COLUMNS]


@contextmanager
def _translated(path: str, what: str) -> Iterator[None]:
    """Translate sqlite3 errors into the jobfsm store errors, naming the file and call."""
    try:
        yield
    except sqlite3.OperationalError as err:
        text = str(err).lower()
        if any(word in text for word in _TRANSIENT):
            raise TransientStoreError(f"SQLite store {path}: {what}: {err}") from err
        if any(word in text for word in _SCHEMA):
            raise SchemaError(
                f"SQLite store {path}: {what}: {err} (run `jobfsm migrate` or reopen the store)"
            ) from err
        raise StoreError(f"SQLite store {path}: {what}: {err}") from err
    except sqlite3.Error as err:
        raise StoreError(f"SQLite store {path}: {what}: {err}") from err


class SqliteStore:
    """Jobs and audit trail in one SQLite file (WAL, one connection per thread).

    It does not offer `fsm.ports.ConfirmsDeath`: SQLite cannot confirm a worker's death
    across hosts; pids confirm it on this host and leases elsewhere.
    """

    def __init__(self, options: SqliteOptions) -> None:
        self.options = options
        self.path = options.path
        self._local = threading.local()
        self._lock = threading.Lock()
        #: (pid, thread, connection) of every connection this store opened.
        self._conns: list[tuple[int, threading.Thread, sqlite3.Connection]] = []
        #: connections inherited across fork: never used and never closed in the child.
        self._inherited: list[sqlite3.Connection] = []
        self._closed = False
        #: serializes this process's write transactions (see `_write`)
        self._writer = threading.Lock()
        self._writer_pid = os.getpid()

    # --- connections -----------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        with _translated(self.path, "open"):
            conn = sqlite3.connect(
                self.path,
                timeout=self.options.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,  # close() may run on another thread
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"SQLite store {self.path}: cannot use WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.options.synchronous}")
        return conn

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == pid:
            return conn
        self._writer_lock()  # after fork, renews the locks another thread may have held
        conn = self._connect()
        me = threading.current_thread()
        with self._lock:
            keep = []
            for owner_pid, thread, c in self._conns:
                if owner_pid != pid:
                    self._inherited.append(c)  # closing it here could disturb the parent
                elif not thread.is_alive():
                    c.close()  # its thread is gone: bound the number of open connections
                else:
                    keep.append((owner_pid, thread, c))
            keep.append((pid, me, conn))
            self._conns = keep
        self._local.conn = conn
        self._local.pid = pid
        return conn

    def _writer_lock(self) -> threading.Lock:
        pid = os.getpid()
        if self._writer_pid != pid:  # after fork: the parent's lock states mean nothing here
            self._writer = threading.Lock()
            self._lock = threading.Lock()
            self._writer_pid = pid
        return self._writer

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with BEGIN IMMEDIATE (waits up to the busy timeout).

        Threads of one process queue on a lock first, so SQLite's busy handler
        (which polls and is not fair) only arbitrates between processes.
        Both waits are bounded by the busy timeout.
        """
        conn = self._conn()
        writer = self._writer_lock()
        timeout = self.options.busy_timeout_ms / 1000
        if not writer.acquire(timeout=timeout):
            raise TransientStoreError(
                f"SQLite store {self.path}: {what}: database is locked (waited "
                f"{self.options.busy_timeout_ms} ms for this process's other writers)"
            )
        try:
            with _translated(self.path, what):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            log.warning("rollback failed on %s", self.path, exc_info=True)
                    raise
        finally:
            writer.release()

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        conn = self._conn()
        with _translated(self.path, what):
            return conn.execute(sql, params).fetchall()

    # --- schema --------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest migration step applied to the file (0 for an empty file)."""
        conn = self._conn()
        with _translated(self.path, "read schema version"):
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if exists is None:
                return 0
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            return int(row[0])

    def migrate(self) -> list[int]:
        """Apply the missing migration steps; return their numbers (empty if none)."""
        applied: list[int] = []
        with self._write("migrate") as conn:
            conn.execute(CREATE_VERSION_TABLE)
            current = int(
                conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            )
            if current > SCHEMA_VERSION:
                raise SchemaError(
                    f"SQLite store {self.path} has schema version {current}, newer than "
                    f"{SCHEMA_VERSION}, the newest this jobfsm knows; upgrade jobfsm"
                )
            for number, statements in MIGRATIONS:
                if number <= current:
                    continue
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                    (number, time.time()),
                )
                applied.append(number)
        if applied:
            log.info("SQLite store %s: applied migrations %s", self.path, applied)
        return applied

    # --- the Store port ------------------------------------------------------------

    def insert(self, decisions: Sequence[Decision]) -> list[Job]:
        out: list[Job] = []
        with self._write("insert") as conn:
            for d in decisions:
                key = d.job.idempotency_key
                if key is not None:
                    row = conn.execute(
                        f"SELECT {_JOB_COLS} FROM jobs WHERE idempotency_key = ?", (key,)
                    ).fetchone()
                    if row is not None:
                        out.append(_job(row))
                        continue
                conn.execute(
                    f"INSERT INTO jobs ({_JOB_COLS}) VALUES ({_JOB_MARKS})", _job_values(d.job)
                )
                if d.entry is not None:
                    self._append(conn, [d.entry])
                out.append(d.job)
        return out

    def get(self, job_id: str) -> Job | None:
        rows = self._read("get", f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.limit < 1 or not request.queues or not request.states:
            return []
        if request.ids is not None and not request.ids:
            return []
        where = [
            f"state IN {in_list(request.states)}",
            f"queue IN ({', '.join('?' for _ in request.queues)})",
            "run_after <= ?",
            "(deadline IS NULL OR deadline > ?)",
        ]
        params: list[Any] = [*request.queues, request.now, request.now]
        if request.ids is not None:
            where.append(f"id IN ({', '.join('?' for _ in request.ids)})")
            params.extend(request.ids)
        params.append(request.limit)
        select = (
            f"SELECT {_JOB_COLS} FROM jobs WHERE {' AND '.join(where)} "
            "ORDER BY priority, run_after, id LIMIT ?"
        )
        leased: list[Job] = []
        with self._write("claim") as conn:
            candidates = [_job(r) for r in conn.execute(select, params).fetchall()]
            # The core decides each lease from the pre-image; the store only applies it.
            decisions = [request.decide(job) for job in candidates]
            for start in range(0, len(decisions), _CHUNK):
                chunk = decisions[start : start + _CHUNK]
                written = self._write_decided(conn, chunk)
                leased.extend(written)
            self._append(conn, [d.entry for d in decisions if d.entry is not None])
        return leased

    def _write_decided(self, conn: sqlite3.Connection, decisions: Sequence[Decision]) -> list[Job]:
        """Write the core's decided records in one statement, compare-and-set on version.

        One job: `UPDATE ... WHERE id = ? AND version = ?`. Several: one
        `WITH v(...) AS (VALUES ...) UPDATE jobs SET ... FROM v` over all of them.
        The values written are the decisions' records, field for field.
        """
        cols = _DECIDED_COLS
        if len(decisions) == 1:
            (d,) = decisions
            written = {d.job.id: d.job.version} if _cas_update(conn, d) else {}
        else:
            row_marks = "(" + ", ".join("?" for _ in range(len(cols) + 2)) + ")"
            values: list[Any] = []
            for d in decisions:
                assert d.previous is not None
                values += [d.job.id, d.previous.version, *_job_values(d.job)[1:]]
            sql = (
                f"WITH v(id, old_version, {', '.join(cols)}) AS "
                f"(VALUES {', '.join(row_marks for _ in decisions)}) "
                f"UPDATE jobs SET {', '.join(f'{c} = v.{c}' for c in cols)} FROM v "
                f"WHERE jobs.id = v.id AND jobs.version = v.old_version "
                f"RETURNING id, version"
            )
            written = {r[0]: r[1] for r in conn.execute(sql, values).fetchall()}
        for d in decisions:
            if written.get(d.job.id) != d.job.version:
                # Impossible under BEGIN IMMEDIATE; refuse rather than lease silently.
                raise StoreError(
                    f"SQLite store {self.path}: job {d.job.id}: the lease was not written "
                    f"as the core decided it (version {d.job.version})"
                )
        return [d.job for d in decisions]

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        out: list[Job | VersionConflict] = []
        with self._write("apply") as conn:
            for d in decisions:
                assert d.previous is not None, "apply takes decisions on existing jobs"
                if not _cas_update(conn, d):
                    row = conn.execute(
                        "SELECT version FROM jobs WHERE id = ?", (d.job.id,)
                    ).fetchone()
                    actual = None if row is None else int(row[0])
                    out.append(VersionConflict(d.job.id, d.previous.version, actual))
                    continue
                if d.entry is not None:
                    self._append(conn, [d.entry])
                out.append(d.job)
        return out

    def renew(self, request: RenewRequest) -> dict[str, str]:
        if not request.fences or not request.states:
            return {}
        owner = owner_to_text(request.owner)
        items = list(request.fences.items())
        renewed: dict[str, str] = {}
        with self._write("renew") as conn:
            for start in range(0, len(items), _CHUNK * 10):
                chunk = items[start : start + _CHUNK * 10]
                sql = (
                    f"WITH v(id, fence) AS (VALUES {', '.join('(?, ?)' for _ in chunk)}) "
                    "UPDATE jobs SET lease_until = ?, version = version + 1, updated_at = ? "
                    "FROM v WHERE jobs.id = v.id AND jobs.fence = v.fence AND jobs.owner = ? "
                    f"AND jobs.state IN {in_list(request.states)} RETURNING id, state"
                )
                params: list[Any] = [x for pair in chunk for x in pair]
                params += [request.lease_until, request.now, owner]
                for row in conn.execute(sql, params).fetchall():
                    renewed[row[0]] = row[1]
        return renewed

    def record(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        with self._write("record") as conn:
            for entry in entries:
                conn.execute(
                    f"INSERT INTO job_events ({_AUDIT_COLS}) SELECT {_AUDIT_MARKS} "
                    "WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?)",
                    [*_audit_values(entry), entry.job_id],
                )

    def _append(self, conn: sqlite3.Connection, entries: Sequence[AuditEntry]) -> None:
        if entries:
            conn.executemany(
                f"INSERT INTO job_events ({_AUDIT_COLS}) VALUES ({_AUDIT_MARKS})",
                [_audit_values(e) for e in entries],
            )

    def scan(self, request: ScanRequest) -> list[Job]:
        if not request.states or request.limit < 1:
            return []
        where = [f"state IN {in_list(request.states)}"]
        params: list[Any] = []
        # Without statistics the planner prefers the plain state index; point it at
        # the partial index the sweep was built for when the query matches it.
        index = ""
        if request.lease_expired_at is not None and set(request.states) == set(LEASED_STATES):
            index = "INDEXED BY jobs_lease"
        elif request.deadline_passed_at is not None and set(request.states) == set(ACTIVE_STATES):
            index = "INDEXED BY jobs_deadline"
        if request.lease_expired_at is not None:
            where.append("lease_until IS NOT NULL AND lease_until <= ?")
            params.append(request.lease_expired_at)
        if request.deadline_passed_at is not None:
            where.append("deadline IS NOT NULL AND deadline <= ?")
            params.append(request.deadline_passed_at)
        if request.owner_host is not None:
            where.append("owner IS NOT NULL AND json_extract(owner, '$.host') = ?")
            params.append(request.owner_host)
        for column, wanted in (("queue", request.queues), ("kind", request.kinds)):
            if wanted is not None:
                if not wanted:
                    return []
                where.append(f"{column} IN ({', '.join('?' for _ in wanted)})")
                params.extend(wanted)
        params.append(request.limit)
        rows = self._read(
            "scan",
            f"SELECT {_JOB_COLS} FROM jobs {index} WHERE {' AND '.join(where)} LIMIT ?",
            params,
        )
        return [_job(r) for r in rows]

    def history(self, job_id: str) -> list[AuditEntry]:
        rows = self._read(
            "history",
            f"SELECT {_AUDIT_COLS} FROM job_events WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        return [AuditEntry(*r) for r in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        rows = self._read("counts", "SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state")
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def prune(self, request: PruneRequest) -> int:
        if not request.cutoffs or request.limit < 1:
            return 0
        ors = []
        params: list[Any] = []
        for state, cutoff in sorted(request.cutoffs.items()):
            in_list([state])  # validates the name
            ors.append("(state = ? AND finished_at IS NOT NULL AND finished_at < ?)")
            params += [state, cutoff]
        params.append(request.limit)
        with self._write("prune") as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM jobs WHERE {' OR '.join(ors)} LIMIT ?", params
                ).fetchall()
            ]
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                conn.execute(f"DELETE FROM job_events WHERE job_id IN ({marks})", chunk)
                conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", chunk)
        return len(ids)

    def close(self) -> None:
        """Close this process's connections; the store cannot be used afterwards."""
        pid = os.getpid()
        with self._lock:
            self._closed = True
            for owner_pid, _thread, conn in self._conns:
                if owner_pid == pid:
                    conn.close()
            self._conns = []
        self._local = threading.local()


def open_store(url: str) -> SqliteStore:
    """Open (creating and migrating if needed) the SQLite store a URL names."""
    store = SqliteStore(parse_url(url))
    try:
        store.migrate()
    except BaseException:
        store.close()
        raise
    return store
