"""Wake-ups through LISTEN/NOTIFY: a hint that jobs were inserted; polling stays the truth.

`insert` sends `pg_notify('jobfsm_<schema>', queue)` in its transaction, so a
notification arrives only once its jobs are committed. A `Listener` keeps one
dedicated connection (not from the pool) listening on that channel.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import psycopg

from fsm.errors import BadInput, StoreError

log = logging.getLogger(__name__)

#: the longest wait `wait` accepts (seconds)
MAX_WAIT = 3600.0
#: longest single wait on the connection, so `close` never waits longer for a waiter
LISTEN_SLICE = 1.0


class Listener:
    """One LISTEN connection, opened on first use and reopened after a failure."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], channel: str) -> None:
        self._connect = connect
        self.channel = channel
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """True when a job is inserted into one of `queues`, False after `timeout`.

        At most MAX_WAIT seconds; one waiter at a time (others wait for it up to
        their timeout); `close` ends a wait within LISTEN_SLICE. If the connection
        fails, the failure is logged, the call waits out its timeout and returns False.
        """
        if isinstance(timeout, bool) or not math.isfinite(timeout) or timeout < 0:
            raise BadInput(f"wait_for_jobs timeout must be a non-negative number, got {timeout!r}")
        timeout = min(timeout, MAX_WAIT)
        deadline = time.monotonic() + timeout
        wanted = set(queues)
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            conn = self._connection()
            while (remaining := deadline - time.monotonic()) > 0 and not self._closed:
                for note in conn.notifies(timeout=min(remaining, LISTEN_SLICE), stop_after=1):
                    if note.payload in wanted:
                        return True
            return False
        except (psycopg.Error, StoreError) as err:
            log.warning("LISTEN for new jobs failed (%s); falling back to polling", err)
            self._drop()
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False
        finally:
            if self._closed:
                self._drop()
            self._lock.release()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            conn = self._connect()
            conn.execute(f'LISTEN "{self.channel}"')
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._closed = True
        # a waiter notices `_closed` within LISTEN_SLICE and drops the connection itself
        if self._lock.acquire(timeout=2 * LISTEN_SLICE):
            try:
                self._drop()
            finally:
                self._lock.release()
