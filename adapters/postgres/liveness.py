"""Cross-host liveness on PostgreSQL: a session advisory lock per worker process.

`hold(owner)` opens a DEDICATED connection (never from the pool) and takes the
session lock `pg_advisory_lock(LIVENESS_CLASS, key32(owner.incarnation))`, then
registers the owner in `<schema>.liveness`. The server drops the lock the moment
that session ends, so when the process dies any other process can confirm it
with `probe`. The key space: the first int is jobfsm's reserved class id
(0x4A464C56, "JFLV"), the second a 32-bit BLAKE2b hash of the incarnation. A hash
collision between two live owners can only make `probe` say "alive" for a dead
one (fail closed), or make `hold` fail after HOLD_TIMEOUT with a StoreError.

A monitor thread watches the connection: it wakes when the socket turns readable
(the server terminated the session) or every CHECK_INTERVAL seconds, and runs
`SELECT pg_backend_pid()`. TCP keepalives and `tcp_user_timeout` bound how long a silent
network can hide a dead connection. So `on_lost` is called once, at most
CHECK_INTERVAL + TCP_USER_TIMEOUT seconds (4 s) after the session is gone, and
within milliseconds when the server ends it.

The lock proves a worker alive only if its connection IS one server session. A
transaction-pooling proxy (PgBouncer with `pool_mode = transaction` or
`statement`) lends a server session per transaction: the lock stays on a session
other clients then use, and their probes read a live worker as dead. So the
server's backend pid must stay the same: `hold` checks it PID_CHECKS times
before it takes the lock (and refuses with `StoreError` naming transaction
pooling if it moves), and the monitor checks it at every wake-up (a change
counts as a lost lock, logged with the same explanation).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from fsm.errors import StoreError, TransientStoreError
from fsm.records import Owner

from ._base import Connected
from .migrations import LIVENESS_CLASS, key32

log = logging.getLogger(__name__)

#: seconds between two checks of an idle liveness connection
CHECK_INTERVAL = 1.0
#: milliseconds unacknowledged data may wait before the kernel drops the connection
TCP_USER_TIMEOUT_MS = 3000
#: seconds `hold` waits for the lock (only another session of the same key can hold it)
HOLD_TIMEOUT = 5.0
#: seconds a registration of an owner that never released is kept (30 days)
REGISTRATION_TTL = 30 * 24 * 3600.0
#: seconds `release` waits for the monitor thread to finish
RELEASE_TIMEOUT = 5.0
#: how many times `hold` reads the backend pid before it takes the lock
PID_CHECKS = 4


def pooling_error(first: int, then: int) -> str:
    """Why a liveness session whose backend pid moved cannot be used."""
    return (
        f"the PostgreSQL backend pid of the liveness session changed ({first} -> {then}): "
        "the connection goes through a proxy doing transaction pooling (PgBouncer pool_mode = "
        "transaction or statement), which lends a server session per transaction, so a "
        "session advisory lock cannot prove a worker alive and live workers would be "
        "judged dead. Point jobfsm at PostgreSQL directly, or at a session-pooling proxy "
        "(pool_mode = session)"
    )


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    """The server process serving this statement (never prepared: a pooler may move it)."""
    row = conn.execute("SELECT pg_backend_pid()", prepare=False).fetchone()
    if row is None:
        raise psycopg.InterfaceError("SELECT pg_backend_pid() returned no row")
    return int(row[0])


_KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
}


class _Pooled(Exception):
    """The backend pid moved between two statements of one connection."""


def lock_key(owner: Owner) -> tuple[int, int]:
    """The two-int advisory-lock key of an owner."""
    return (LIVENESS_CLASS, key32(owner.incarnation))


class _Holder(threading.Thread):
    """Owns the dedicated connection; watches it until released or lost."""

    def __init__(
        self,
        owner: Owner,
        conn: psycopg.Connection[Any],
        on_lost: Callable[[], None],
        s: str,
        pid: int,
    ) -> None:
        super().__init__(name=f"jobfsm-liveness-{owner.incarnation[:8]}", daemon=True)
        self.owner = owner
        self.conn = conn
        self.pid = pid
        self.on_lost = on_lost
        self.s = s
        self.stopping = threading.Event()
        self.lost = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        # `stop` may race the thread's own end (the connection lost at the moment it is
        # released): the pipe is written and closed under one lock, never written once
        # closed, since a closed descriptor's number may already be another file's.
        self._pipe_lock = threading.Lock()
        self._pipe_open = True

    def stop(self) -> None:
        self.stopping.set()
        with self._pipe_lock:
            if self._pipe_open:
                os.write(self._wake_w, b"x")

    def run(self) -> None:
        try:
            lost = self._watch()
        finally:
            with self._pipe_lock:
                self._pipe_open = False
                os.close(self._wake_r)
                os.close(self._wake_w)
        if lost:
            self.lost.set()
            self._close()
            log.warning("liveness connection of %s lost; its leases count as lost", self.owner)
            try:
                self.on_lost()
            except Exception:
                log.exception("on_lost callback of %s failed", self.owner)
        else:
            self._unregister()

    def _watch(self) -> bool:
        """Return True when the connection is lost, False when asked to stop."""
        while not self.stopping.is_set():
            try:
                select.select([self.conn.fileno(), self._wake_r], [], [], CHECK_INTERVAL)
            except (OSError, ValueError, psycopg.Error):
                return True
            if self.stopping.is_set():
                return False
            try:
                pid = backend_pid(self.conn)
            except psycopg.Error:
                return True
            if pid != self.pid:
                log.error("liveness of %s: %s", self.owner, pooling_error(self.pid, pid))
                return True
        return False

    def _unregister(self) -> None:
        try:
            self.conn.execute(
                f"DELETE FROM {self.s}.liveness WHERE incarnation = %s", (self.owner.incarnation,)
            )
            self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", lock_key(self.owner))
        except psycopg.Error:
            log.debug("releasing liveness of %s failed; closing its session", exc_info=True)
        self._close()

    def _close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self.conn.close()


class PostgresLiveness:
    """fsm.ports.Liveness on PostgreSQL advisory locks (see the module docstring)."""

    def __init__(self, store: Connected) -> None:
        self._store = store
        self._holders: dict[str, _Holder] = {}
        self._lock = threading.Lock()
        s = store.sql.s
        self._probe = (
            f"SELECT CASE WHEN EXISTS (SELECT 1 FROM {s}.liveness WHERE incarnation = %s) "
            "THEN pg_try_advisory_xact_lock(%s, %s) END"
        )
        self._register = (
            f"INSERT INTO {s}.liveness (incarnation, host, pid, lock_key, held_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (incarnation) DO UPDATE SET "
            "host = excluded.host, pid = excluded.pid, held_at = excluded.held_at"
        )
        self._forget = f"DELETE FROM {s}.liveness WHERE held_at < %s"

    def hold(self, owner: Owner, on_lost: Callable[[], None]) -> None:
        """Take `owner`'s liveness lock on a dedicated connection and watch it.

        Holding it again while it is held is a no-op. Raises StoreError if another
        session holds the key for HOLD_TIMEOUT seconds, TransientStoreError if
        PostgreSQL cannot be reached.
        """
        with self._lock:
            current = self._holders.get(owner.incarnation)
            if current is not None and current.is_alive() and not current.lost.is_set():
                return
            conn = self._store.connect("liveness", **_KEEPALIVE)
            try:
                pid = self._stable_pid(conn)
                conn.execute(f"SET lock_timeout = '{int(HOLD_TIMEOUT * 1000)}ms'")
                conn.execute("SELECT pg_advisory_lock(%s, %s)", lock_key(owner))
                conn.execute("RESET lock_timeout")
                now = time.time()
                conn.execute(self._forget, (now - REGISTRATION_TTL,))
                conn.execute(
                    self._register,
                    (owner.incarnation, owner.host, owner.pid, lock_key(owner)[1], now),
                )
            except _Pooled as err:
                conn.close()
                raise StoreError(f"liveness of {owner}: {err}") from None
            except pgerrors.LockNotAvailable as err:
                conn.close()
                raise StoreError(
                    f"liveness lock {lock_key(owner)} of {owner} is held by another session "
                    f"(a duplicate incarnation or a hash collision); use a fresh incarnation"
                ) from err
            except psycopg.Error as err:
                conn.close()
                raise TransientStoreError(f"taking the liveness lock of {owner}: {err}") from err
            holder = _Holder(owner, conn, on_lost, self._store.sql.s, pid)
            self._holders[owner.incarnation] = holder
            holder.start()

    @staticmethod
    def _stable_pid(conn: psycopg.Connection[Any]) -> int:
        """The session's backend pid, read PID_CHECKS times; _Pooled if it moves."""
        pid = backend_pid(conn)
        for _ in range(PID_CHECKS - 1):
            again = backend_pid(conn)
            if again != pid:
                raise _Pooled(pooling_error(pid, again))
        if conn.info.backend_pid != pid:
            log.warning(
                "the liveness session reaches PostgreSQL through a connection pooler (the "
                "server's pid %s is not the one announced at connect); only session pooling "
                "keeps a liveness lock on its session",
                pid,
            )
        return pid

    def release(self, owner: Owner) -> None:
        """Give the lock back (unregister, unlock, close); `on_lost` is not called."""
        with self._lock:
            holder = self._holders.pop(owner.incarnation, None)
        if holder is not None and holder.is_alive():
            holder.stop()
            holder.join(RELEASE_TIMEOUT)

    def probe(self, owner: Owner) -> str:
        """'dead' if `owner` registered and its lock is free, 'alive' if held, else 'unknown'."""
        try:
            with self._store.connection("liveness probe") as conn:
                row = conn.execute(self._probe, (owner.incarnation, *lock_key(owner))).fetchone()
        except Exception as err:  # fail closed: any doubt is "unknown", never "dead"
            log.warning("liveness probe of %s failed: %s", owner, err)
            return "unknown"
        if row is None or row[0] is None:
            return "unknown"
        return "dead" if row[0] else "alive"

    def held(self, owner: Owner) -> bool:
        """True while this process holds `owner`'s lock and has not lost it."""
        holder = self._holders.get(owner.incarnation)
        return holder is not None and holder.is_alive() and not holder.lost.is_set()

    def close(self) -> None:
        with self._lock:
            owners = [h.owner for h in self._holders.values()]
        for owner in owners:
            self.release(owner)
