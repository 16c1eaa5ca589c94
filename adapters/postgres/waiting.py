"""Waiting for outcomes through LISTEN/NOTIFY (`fsm.ports.WatchesJobs`).

A trigger on `<schema>.jobs` sends `pg_notify('jobfsm_<schema>_final', id)` when
a job enters a final state (terminal or parked, as the spec says), so the
notification arrives only once that state is committed. The trigger is made on
the first `watch` (idempotent, under an advisory lock), not by a migration: a
store that nobody waits on pays nothing for it.

One `FinalStates` hub per store keeps one dedicated connection listening, on its
own thread, and calls the watchers of the job a notification names. When the
connection fails, every watcher is called (each re-reads its job), and the hub
reconnects with a bounded backoff; the waits themselves re-read every few
seconds whatever happens (`fsm.service.engine.WAIT_RECHECK`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psycopg

from fsm.errors import TransientStoreError
from fsm.lifecycle.spec import lifecycle

from .migrations import quote

log = logging.getLogger(__name__)

#: longest single wait on the connection, so `close` is never kept waiting longer
LISTEN_SLICE = 1.0
#: how long `watch` waits for the listener to be up before it fails (seconds)
READY_TIMEOUT = 10.0
#: pause after a failed listener connection: first, then doubling up to the cap
RETRY_FIRST = 0.1
RETRY_CAP = 5.0
#: advisory lock key that serialises making the trigger (any schema)
TRIGGER_LOCK = 0x6A6F6266736D  # "jobfsm"


def _trigger_sql(schema: str, channel: str) -> str:
    """The function and trigger (the schema name is validated and quoted by `quote`)."""
    spec = lifecycle()
    schema = quote(schema)
    finals = ", ".join(f"'{state}'" for state in sorted(spec.terminal | spec.parked))
    return f"""
CREATE OR REPLACE FUNCTION {schema}.jobfsm_notify_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('{channel}', NEW.id);
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER jobfsm_notify_final
AFTER UPDATE OF state ON {schema}.jobs
FOR EACH ROW WHEN (NEW.state IN ({finals}) AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION {schema}.jobfsm_notify_final();
"""


def drop_trigger(conn: psycopg.Connection[Any], schema: str) -> None:
    """Remove the trigger's function (the trigger goes with it), for `drop_schema`."""
    conn.execute(f"DROP FUNCTION IF EXISTS {quote(schema)}.jobfsm_notify_final() CASCADE")


class FinalStates:
    """The listener behind `PostgresStore.watch`: one connection, one thread, many watchers."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], schema: str, channel: str
    ) -> None:
        #: opens the listener's connection (a seam: the waits fault model holds it)
        self.connect = connect
        self._schema = schema
        self.channel = channel
        self._lock = threading.Lock()
        self._watchers: dict[str, dict[int, Callable[[], None]]] = {}
        self._next = 0
        self._ready = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, job_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Register `changed` for `job_id`; once this returns, the listener is up."""
        with self._lock:
            self._next += 1
            key = self._next
            self._watchers.setdefault(job_id, {})[key] = changed
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._listen, name="jobfsm-pg-final", daemon=True
                )
                self._thread.start()

        def unwatch() -> None:
            with self._lock:
                mine = self._watchers.get(job_id)
                if mine is not None:
                    mine.pop(key, None)
                    if not mine:
                        del self._watchers[job_id]

        if not self._ready.wait(READY_TIMEOUT):
            unwatch()
            raise TransientStoreError(
                f"waiting for job {job_id}: LISTEN not ready within {READY_TIMEOUT}s"
            )
        return unwatch

    def watching(self, job_id: str) -> int:
        """How many wake-ups are registered for `job_id` (one per wait not ended)."""
        with self._lock:
            return len(self._watchers.get(job_id, {}))

    def _listen(self) -> None:
        pause = RETRY_FIRST
        while not self._closed.is_set():
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = self.connect()
                self._install(conn)
                conn.execute(f'LISTEN "{self.channel}"')
                self._ready.set()
                self._wake_all()  # anything that finished while we were away is re-read
                pause = RETRY_FIRST
                while not self._closed.is_set():
                    for note in conn.notifies(timeout=LISTEN_SLICE):
                        if self._closed.is_set():  # woken by `close`
                            break
                        self._wake(note.payload)
            except (psycopg.Error, TransientStoreError) as err:
                self._ready.clear()
                log.warning("LISTEN for final states failed (%s); reconnecting", err)
                self._wake_all()
                self._closed.wait(pause)
                pause = min(RETRY_CAP, pause * 2)
            finally:
                if conn is not None:
                    with suppress(psycopg.Error):
                        conn.close()

    def _install(self, conn: psycopg.Connection[Any]) -> None:
        """Make the trigger unless it is there with the spec's final states: making it
        locks the jobs table for a moment, so a reconnect skips it when it can."""
        finals = sorted(lifecycle().terminal | lifecycle().parked)
        row = conn.execute(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname = 'jobfsm_notify_final' AND c.relname = 'jobs' AND n.nspname = %s",
            (self._schema,),
        ).fetchone()
        if row is not None and all(f"'{state}'" in row[0] for state in finals):
            return
        conn.execute("SELECT pg_advisory_lock(%s)", (TRIGGER_LOCK,))
        try:
            conn.execute(_trigger_sql(self._schema, self.channel))
        except psycopg.errors.InsufficientPrivilege as err:
            log.warning(
                "cannot make the final-state trigger (%s): waits re-read their jobs every "
                "second instead of waking on NOTIFY; let a role that owns the jobs table "
                "wait once to make it",
                str(err).strip(),
            )
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (TRIGGER_LOCK,))

    def _wake(self, job_id: str) -> None:
        with self._lock:
            callbacks = list(self._watchers.get(job_id, {}).values())
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a watcher of job %s failed", job_id)

    def _wake_all(self) -> None:
        with self._lock:
            ids = list(self._watchers)
        for job_id in ids:
            self._wake(job_id)

    def listening(self, timeout: float) -> bool:
        """Whether the listener is up (connected, listening), waiting `timeout` at most."""
        return self._ready.wait(timeout)

    def close(self) -> None:
        """Stop the listener. Its thread is woken by a notification of its own (an empty
        id, which no watcher holds; one short connection) rather than left to finish its
        LISTEN_SLICE, so a store closes at once; if that fails, the slice ends it."""
        self._closed.set()
        thread = self._thread
        if thread is None:
            return
        if thread.is_alive():
            try:
                with self.connect() as conn:
                    conn.execute("SELECT pg_notify(%s, '')", (self.channel,))
            except (psycopg.Error, TransientStoreError) as err:
                log.debug("could not wake the final-state listener to stop it: %s", err)
        thread.join(timeout=2 * LISTEN_SLICE)
