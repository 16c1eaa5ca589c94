"""Upkeep of a SQLite store, mixed into SqliteStore: its schema (`fsm.ports.Migratable`),
pruning finished jobs, the paused queues (`fsm.ports.PausesQueues`) and dropping the
schema."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from contextlib import AbstractContextManager
from typing import Any

from fsm.errors import SchemaError
from fsm.ports import PruneRequest, QueuePause

from .schedules import SCHEDULE_TABLES
from .schema import CREATE_VERSION_TABLE, MIGRATIONS, SCHEMA_VERSION, in_list
from .sql import CHUNK, translated

log = logging.getLogger(__name__)


class SqliteUpkeep:
    """Mixed into SqliteStore (it works through the store's connections)."""

    path: str

    def _write(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by SqliteStore

    def _conn(self) -> sqlite3.Connection:
        raise NotImplementedError  # provided by SqliteStore

    def close(self) -> None:
        raise NotImplementedError  # provided by SqliteStore

    # --- schema --------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest migration step applied to the file (0 for an empty file)."""
        conn = self._conn()
        with translated(self.path, "read schema version"):
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if exists is None:
                return 0
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            return int(row[0])

    def migrate(self) -> list[int]:
        """Apply the missing migration steps; return their numbers (empty if none).

        A file already at this version is only read (no write lock), so a store
        opens while another process holds, or is frozen in, a write transaction.
        """
        applied: list[int] = []
        if self.schema_version() == SCHEMA_VERSION:
            return applied
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

    def prune(self, request: PruneRequest) -> int:
        return sum(self.prune_counts(request).values())

    def prune_counts(self, request: PruneRequest) -> dict[tuple[str, str], int]:
        """`fsm.ports.CountsPrunes`: `prune`, by (queue, state) deleted."""
        if not request.cutoffs or request.limit < 1:
            return {}
        ors = []
        params: list[Any] = []
        for state, cutoff in sorted(request.cutoffs.items()):
            in_list([state])  # validates the name
            ors.append("(state = ? AND finished_at IS NOT NULL AND finished_at < ?)")
            params += [state, cutoff]
        where = f"({' OR '.join(ors)})"
        if request.queues is not None:
            if not request.queues:
                return {}
            where += f" AND queue IN ({', '.join('?' for _ in request.queues)})"
            params += list(request.queues)
        if request.other_than:
            where += f" AND queue NOT IN ({', '.join('?' for _ in request.other_than)})"
            params += list(request.other_than)
        if request.held_by:  # keep what a waiting job still waits for
            where += (
                " AND NOT EXISTS (SELECT 1 FROM job_deps d JOIN jobs w ON w.id = d.job_id "
                f"WHERE d.after_id = jobs.id AND w.state IN {in_list(request.held_by)})"
            )
        params.append(request.limit)
        deleted: dict[tuple[str, str], int] = {}
        with self._write("prune") as conn:
            rows = conn.execute(f"SELECT id, queue, state FROM jobs WHERE {where} LIMIT ?", params)
            ids = []
            for job_id, queue, state in rows.fetchall():
                ids.append(job_id)
                deleted[(queue, state)] = deleted.get((queue, state), 0) + 1
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                marks = ", ".join("?" for _ in chunk)
                conn.execute(f"DELETE FROM job_events WHERE job_id IN ({marks})", chunk)
                conn.execute(f"DELETE FROM job_deps WHERE job_id IN ({marks})", chunk)
                conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", chunk)
        return deleted

    def pause_queue(self, pause: QueuePause) -> None:
        row = (pause.queue, pause.actor, pause.reason, pause.at)
        with self._write("pause queue") as conn:
            conn.execute("INSERT OR REPLACE INTO queue_pauses VALUES (?, ?, ?, ?)", row)

    def resume_queue(self, queue: str) -> bool:
        with self._write("resume queue") as conn:
            gone = conn.execute("DELETE FROM queue_pauses WHERE queue = ?", (queue,)).rowcount
        return bool(gone)

    def paused_queues(self) -> dict[str, QueuePause]:
        with translated(self.path, "paused queues"):
            rows = self._conn().execute("SELECT queue, actor, reason, at FROM queue_pauses")
            return {r[0]: QueuePause(*r) for r in rows.fetchall()}

    def drop_schema(self) -> tuple[str, ...]:
        """Remove jobfsm's tables; then, if nothing else is left in the file, the file
        itself with its -wal and -shm files. Returns the names of what is left in the
        file (empty when it is gone). Closes the store.

        Call it when no other process uses the file (`jobfsm faults` cleans up so).
        """
        with self._write("drop schema") as conn:
            tables: tuple[str, ...] = (
                "job_events",
                "job_deps",
                "jobs",
                "queue_pauses",
                "schedules",
                "limits",
                "limit_changes",
                "limit_leases",
                "service_leases",
                *SCHEDULE_TABLES,
            )
            for table in (*tables, "schema_version"):
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            left = tuple(
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' "
                    "ESCAPE '\\' ORDER BY name"
                ).fetchall()
            )
        self.close()  # the last connection to close checkpoints and removes -wal, -shm
        if not left:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path + suffix)
        return left
