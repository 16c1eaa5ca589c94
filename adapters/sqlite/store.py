"""SqliteStore: the Store port on one SQLite file, safe for threads and processes."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fsm.errors import StoreError, TransientStoreError, VersionConflict
from fsm.lifecycle.core import erased_data_json
from fsm.ports import (
    Capacity,
    ClaimRequest,
    ProgressRequest,
    RenewRequest,
    ScanRequest,
)
from fsm.records import AuditEntry, Decision, Job

from ..claiming import Unclaimable, decide_leases, start_leased
from ..rejections import first_rejections, rejected_key
from ..rows import check_storable, job_from_values, owner_to_text
from .browse import SqliteBrowse
from .deps import SqliteDependencies
from .history import SqliteHistory
from .inserts import JoinsSqlite, insert_rows
from .limits import SqliteLimits
from .schedules import SqliteSchedules
from .schema import (
    ACTIVE_STATES,
    LEASED_STATES,
    in_list,
)
from .services import SqliteServices
from .sql import (
    AUDIT_COLS,
    AUDIT_INSERT,
    CHUNK,
    CLAIM_ROUNDS,
    JOB_COLS,
    RECORD,
    RECORD_REJECTED,
    audit_values,
    cas_groups,
    cas_statement,
    create_private,
    translated,
)
from .upkeep import SqliteUpkeep
from .url import SqliteOptions, parse_url

log = logging.getLogger(__name__)


class SqliteStore(
    SqliteBrowse,
    SqliteHistory,
    JoinsSqlite,
    SqliteSchedules,
    SqliteServices,
    SqliteDependencies,
    SqliteUpkeep,
    SqliteLimits,
):
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
        self._unclaimable = Unclaimable(log)
        #: what every statement's connection is handed through (`wrap_connections`)
        self._wrap: Callable[[sqlite3.Connection], sqlite3.Connection] | None = None

    # --- connections -----------------------------------------------------------

    def wrap_connections(self, wrap: Callable[[sqlite3.Connection], sqlite3.Connection]) -> None:
        """From now on, hand the connection of every statement this store sends through
        `wrap` (over any wrap given before): the seam of `fsm.ports.WrapsConnections`, by
        which the crash fault model fails the Nth statement. The store keeps, reuses and
        closes the connections themselves as before."""
        inner = self._wrap
        self._wrap = wrap if inner is None else (lambda conn: wrap(inner(conn)))

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"SQLite store {self.path} is closed")
        with translated(self.path, "open"):
            create_private(self.path)
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

    def thread_connection(self) -> sqlite3.Connection:
        """This thread's connection to the file (opened on first use, in WAL mode with the
        URL's options; a forked child opens its own). For reads and checks of the file
        itself (PRAGMAs, query plans) by operators and tests: jobfsm's writes go
        through the store's methods, which take the write lock first."""
        return self._conn()

    def _conn(self) -> sqlite3.Connection:
        # every statement of the store takes its connection here (`wrap_connections`)
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == pid:
            return conn if self._wrap is None else self._wrap(conn)
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
        return conn if self._wrap is None else self._wrap(conn)

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
        (which polls and is not fair) only arbitrates between processes. The two
        waits together are bounded by the busy timeout: what the first used up is
        taken from the second. Callers prepare every value before they enter, so
        the write lock is held for the statements alone.
        """
        conn = self._conn()
        writer = self._writer_lock()
        busy_ms = self.options.busy_timeout_ms
        started = time.monotonic()
        if not writer.acquire(timeout=busy_ms / 1000):
            raise TransientStoreError(
                f"SQLite store {self.path}: {what}: database is locked (waited "
                f"{busy_ms} ms for this process's other writers); nothing was written"
            )
        try:
            with translated(self.path, what):
                waited_ms = int((time.monotonic() - started) * 1000)
                if waited_ms >= 1:
                    conn.execute(f"PRAGMA busy_timeout = {max(1, busy_ms - waited_ms)}")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                finally:
                    if waited_ms >= 1:
                        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
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
        with translated(self.path, what):
            return conn.execute(sql, params).fetchall()

    # --- the Store port ------------------------------------------------------------

    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        with self._write("insert") as conn:
            return insert_rows(conn, decisions, capacity)

    def get(self, job_id: str) -> Job | None:
        rows = self._read("get", f"SELECT {JOB_COLS} FROM jobs WHERE id = ?", (job_id,))
        return job_from_values(rows[0]) if rows else None

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.limit < 1 or not request.queues or not request.states:
            return []
        if (request.ids is not None and not request.ids) or request.kinds == ():
            return []
        known = self._unclaimable.known()
        leased: list[Job] = []
        with self._write("claim") as conn:
            if request.retime is not None:
                # The clock is read again now that this transaction holds the write lock:
                # the wait for it (up to the busy timeout) is not before the lease's time.
                request = request.retime()
            select, params = _claim_select(request)
            decisions: list[Decision] = []
            refused: list[str] = []
            limited = self._claim_limited(conn, request, select, params, known)
            if limited is not None:  # a limit applies: the budget picks (docs/flow-control.md)
                decisions, _ = decide_leases(limited[0], request.decide, self._unclaimable)
                claimed = start_leased(decisions, request.start)
                leased = self._write_decided(conn, [c.write for c in claimed])
                self._append(conn, [e for c in claimed for e in c.entries])
                self._mark_leases(conn, limited[1], leased, request.now)
                return leased
            for _ in range(CLAIM_ROUNDS):  # bounded: rounds only look past refused jobs
                skip = [*known, *refused]
                sql = (
                    select
                    if not skip
                    else select.replace(
                        "ORDER BY", f"AND id NOT IN ({', '.join('?' for _ in skip)}) ORDER BY"
                    )
                )
                wanted = request.limit - len(decisions)
                rows = conn.execute(sql, [*params[:-1], *skip, wanted]).fetchall()
                # The core decides each lease from the pre-image; the store only applies
                # it. A job it refuses is skipped (logged once), never the batch.
                got, bad = decide_leases(
                    [job_from_values(r) for r in rows], request.decide, self._unclaimable
                )
                decisions += got
                refused += bad
                if not bad or len(rows) < wanted:
                    break
            claimed = start_leased(decisions, request.start)
            leased = self._write_decided(conn, [c.write for c in claimed])
            self._append(conn, [e for c in claimed for e in c.entries])
        return leased

    def _write_decided(self, conn: sqlite3.Connection, decisions: Sequence[Decision]) -> list[Job]:
        """Write the core's decided records, compare-and-set on version: one
        `executemany` per set of changed columns (`cas_groups`). The values
        written are the decisions' records, field for field."""
        written = sum(conn.executemany(sql, rows).rowcount for sql, rows in cas_groups(decisions))
        if written != len(decisions):
            # Impossible under BEGIN IMMEDIATE; refuse rather than lease silently.
            raise StoreError(
                f"SQLite store {self.path}: {len(decisions) - written} of {len(decisions)} "
                "claimed jobs were not written as the core decided them; the claim is "
                "rolled back"
            )
        return [d.job for d in decisions]

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        for d in decisions:
            assert d.previous is not None, "apply takes decisions on existing jobs"
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        prepared = [
            (cas_statement(d), None if d.entry is None else audit_values(d.entry))
            for d in decisions
        ]
        out: list[Job | VersionConflict] = []
        with self._write("apply") as conn:
            for d, ((sql, params), entry) in zip(decisions, prepared, strict=True):
                if conn.execute(sql, params).rowcount != 1:
                    row = conn.execute(
                        "SELECT version FROM jobs WHERE id = ?", (d.job.id,)
                    ).fetchone()
                    actual = None if row is None else int(row[0])
                    assert d.previous is not None
                    out.append(VersionConflict(d.job.id, d.previous.version, actual))
                    continue
                if entry is not None:
                    conn.execute(AUDIT_INSERT, entry)
                out.append(d.job)
        return out

    def erase(self, decision: Decision) -> Job | VersionConflict:
        assert decision.previous is not None, "erase takes a decision on an existing job"
        check_storable([decision.job], [decision.entry])
        sql, params = cas_statement(decision)
        entry = None if decision.entry is None else audit_values(decision.entry)
        with self._write("erase") as conn:
            if conn.execute(sql, params).rowcount != 1:
                row = conn.execute(
                    "SELECT version FROM jobs WHERE id = ?", (decision.job.id,)
                ).fetchone()
                actual = None if row is None else int(row[0])
                return VersionConflict(decision.job.id, decision.previous.version, actual)
            if entry is not None:
                conn.execute(AUDIT_INSERT, entry)
            rows = conn.execute(
                "SELECT seq, data_json FROM job_events WHERE job_id = ?", (decision.job.id,)
            ).fetchall()
            conn.executemany(
                "UPDATE job_events SET data_json = ? WHERE seq = ?",
                [(erased_data_json(text), seq) for seq, text in rows],
            )
        return decision.job

    def renew(self, request: RenewRequest) -> dict[str, str]:
        if not request.fences or not request.states:
            return {}
        owner = owner_to_text(request.owner)
        items = list(request.fences.items())
        renewed: dict[str, str] = {}
        statements = []
        for start in range(0, len(items), CHUNK * 10):
            chunk = items[start : start + CHUNK * 10]
            sql = (
                f"WITH v(id, fence) AS (VALUES {', '.join('(?, ?)' for _ in chunk)}) "
                "UPDATE jobs SET lease_until = ?, version = version + 1, updated_at = ? "
                "FROM v WHERE jobs.id = v.id AND jobs.fence = v.fence AND jobs.owner = ? "
                f"AND jobs.state IN {in_list(request.states)} RETURNING id, state"
            )
            params: list[Any] = [x for pair in chunk for x in pair]
            params += [request.lease_until, request.now, owner]
            statements.append((sql, params))
        with self._write("renew") as conn:
            for sql, params in statements:
                for row in conn.execute(sql, params).fetchall():
                    renewed[row[0]] = row[1]
        return renewed

    def save_progress(self, request: ProgressRequest) -> list[str]:
        """One conditional UPDATE per chunk: fence, owner and state must still match;
        no version bump, no audit entry (`fsm.ports.ProgressRequest`)."""
        if not request.items or not request.states:
            return []
        owner = owner_to_text(request.owner)
        items = [(i, fence, text) for i, (fence, text) in request.items.items()]
        statements = []
        for start in range(0, len(items), CHUNK * 10):
            chunk = items[start : start + CHUNK * 10]
            sql = (
                f"WITH v(id, fence, progress) AS (VALUES {', '.join('(?, ?, ?)' for _ in chunk)}) "
                "UPDATE jobs SET progress_json = v.progress "
                "FROM v WHERE jobs.id = v.id AND jobs.fence = v.fence AND jobs.owner = ? "
                f"AND jobs.state IN {in_list(request.states)} RETURNING id"
            )
            statements.append((sql, [*(x for row in chunk for x in row), owner]))
        written: list[str] = []
        with self._write("save_progress") as conn:
            for sql, params in statements:
                written += [row[0] for row in conn.execute(sql, params).fetchall()]
        return written

    def record(self, entries: Sequence[AuditEntry]) -> None:
        """Append entries of existing jobs; a rejected (job, event, fence) only once."""
        check_storable((), entries)
        prepared = [
            (RECORD if rejected_key(e) is None else RECORD_REJECTED, audit_values(e))
            for e in first_rejections(entries)
        ]
        if not prepared:
            return
        with self._write("record") as conn:
            for sql, values in prepared:
                conn.execute(sql, values)

    def _append(self, conn: sqlite3.Connection, entries: Sequence[AuditEntry]) -> None:
        if entries:
            conn.executemany(AUDIT_INSERT, [audit_values(e) for e in entries])

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
            f"SELECT {JOB_COLS} FROM jobs {index} WHERE {' AND '.join(where)} LIMIT ?",
            params,
        )
        return [job_from_values(r) for r in rows]

    def history(self, job_id: str) -> list[AuditEntry]:
        rows = self._read(
            "history",
            f"SELECT {AUDIT_COLS} FROM job_events WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        return [AuditEntry(*r) for r in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        rows = self._read("counts", "SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state")
        return {(r[0], r[1]): int(r[2]) for r in rows}

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


def _claim_select(request: ClaimRequest) -> tuple[str, list[Any]]:
    """A claim's candidate query and its parameters (the last one: the limit)."""
    where = [
        f"state IN {in_list(request.states)}",
        f"queue IN ({', '.join('?' for _ in request.queues)})",
        "run_after <= ?",
        "(deadline IS NULL OR deadline > ?)",
    ]
    params: list[Any] = [*request.queues, request.now, request.now]
    if request.kinds is not None:
        where.append(f"kind IN ({', '.join('?' for _ in request.kinds)})")
        params.extend(request.kinds)
    if request.ids is not None:
        where.append(f"id IN ({', '.join('?' for _ in request.ids)})")
        params.extend(request.ids)
    params.append(request.limit)
    select = (
        f"SELECT {JOB_COLS} FROM jobs WHERE {' AND '.join(where)} "
        "ORDER BY priority, run_after, id LIMIT ?"
    )
    return select, params
