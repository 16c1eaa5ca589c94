"""The PostgreSQL store's operations are written once, as plans; this is their language.

A plan is a generator, as psycopg writes its own protocol (`psycopg.generators`): it
yields requests — run a statement (`Run`), several in one round trip (`Pipeline`),
one statement over many rows (`RunMany`), `Copy` rows in, ask whether the connection
broke (`Broken`), ask for a `Fresh` connection after a break — receives each answer
and returns its result. It does no I/O itself, so each operation is one plan
(`ops`, `inserts`, `txn`) driven twice: by `Connected.run` on psycopg's blocking pool
(`PostgresStore`) and by `AsyncPostgresStore.run` on its asyncio pool.

A request that fails has its psycopg error thrown back into the plan at its `yield`,
as psycopg raised it. What leaves a plan is translated at the driver's edge by
`translate`, the one table from psycopg's errors to jobfsm's.

The rule for a write whose connection broke while it ran — the commit may or may not
have happened — lives here once (`write`): it is never assumed either way; a fresh
connection re-reads what the write would have left (`confirm`), and when nothing of
it shows, the caller gets a TransientStoreError that says nothing changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import attrs
import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import PoolTimeout

from adapters._rows import job_from_values
from fsm.errors import BadInput, JobFSMError, SchemaError, StoreError, TransientStoreError
from fsm.records import Decision

from ._sql import Statements
from ._url import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")


class Run(NamedTuple):
    """Execute one statement. Answer: its rows if `fetch`, else None."""

    sql: str
    params: Any = None
    fetch: bool = True


class Pipeline(NamedTuple):
    """Send `runs` in one round trip. Answer: the rows of each (None where not fetched)."""

    runs: tuple[Run, ...]


class RunMany(NamedTuple):
    """Execute `sql` once per parameter row (`executemany`). Answer: None."""

    sql: str
    params: Sequence[Sequence[Any]]


class Copy(NamedTuple):
    """`COPY ... FROM STDIN` the rows. Answer: None."""

    sql: str
    rows: Iterable[Sequence[Any]]


class Broken(NamedTuple):
    """Answer: whether the connection broke (after an error: was it the network?)."""


class Fresh(NamedTuple):
    """Let the broken connection go and continue on a fresh one, for `what`. Answer: None."""

    what: str


class Backend(NamedTuple):
    """Answer: the process id of the connection's server backend (no round trip: libpq
    keeps it from the connection's start)."""


Request = Run | Pipeline | RunMany | Copy | Broken | Fresh | Backend
Plan = Generator[Request, Any, T]


class Done(NamedTuple):
    """The plan returned `value`."""

    value: Any


def advance(
    plan: Plan[Any], answer: Any = None, error: BaseException | None = None
) -> Request | Done:
    """Give `plan` the answer to its last request (or throw it the request's `error`);
    its next request, or Done. The drivers' one step, blocking and async alike."""
    try:
        return plan.send(answer) if error is None else plan.throw(error)
    except StopIteration as stop:
        return Done(stop.value)


BEGIN = Run("BEGIN", fetch=False)
COMMIT = Run("COMMIT", fetch=False)
ROLLBACK = Run("ROLLBACK", fetch=False)
BROKEN = Broken()
BACKEND = Backend()
#: after a connection broke mid-write, how long `reconcile` waits for the server process
#: that ran the write to end (polls x pause), before it re-reads what the write left
ENDED_POLLS = 250
ENDED_PAUSE = 0.02


@attrs.frozen
class Target:
    """What a plan knows of its store: the URL's settings (schema, the redacted URL for
    messages), the schema's statements and the LISTEN/NOTIFY channel of new jobs."""

    settings: Settings
    sql: Statements
    channel: str


def translate(settings: Settings, err: BaseException, what: str) -> JobFSMError:
    """psycopg's error (or the pool's) as jobfsm's, naming the store and `what` it did."""
    where = f"PostgreSQL store {settings.redacted} ({what})"
    text = settings.scrub(str(err))
    if isinstance(err, PoolTimeout):
        return TransientStoreError(
            f"{where}: no connection within {settings.pool_timeout} s "
            f"(pool_max={settings.pool_max}): {text}"
        )
    if isinstance(err, pgerrors.UndefinedTable | pgerrors.InvalidSchemaName):
        return SchemaError(f"{where}: the jobfsm schema {settings.schema!r} is missing: {text}")
    if isinstance(err, psycopg.OperationalError | psycopg.InterfaceError):
        return TransientStoreError(f"{where}: {text}")
    if isinstance(err, psycopg.DataError):
        return BadInput(f"{where}: PostgreSQL rejected a value: {text}")
    return StoreError(f"{where}: {text}")


def not_applied(t: Target, what: str) -> TransientStoreError:
    return TransientStoreError(
        f"PostgreSQL store {t.settings.redacted}: the connection was lost during {what} "
        "and a fresh read shows it was not applied; nothing changed, safe to retry"
    )


def ids(run: Run) -> Plan[set[str]]:
    """The first column of `run`'s rows (the ids a write returns)."""
    rows = yield run
    return {r[0] for r in rows}


def rollback() -> Plan[None]:
    """Roll back after an error, if the connection still works (a failure is logged)."""
    if (yield BROKEN):
        return
    try:
        yield ROLLBACK
    except psycopg.Error:
        log.debug("ROLLBACK after an error failed", exc_info=True)


def commit() -> Plan[None]:
    """COMMIT. A failure on a live connection rolls back and goes up; on a broken one it
    goes up as it is: whether it committed is unknown (`write` finds out)."""
    try:
        yield COMMIT
    except psycopg.Error:
        if not (yield BROKEN):
            yield from rollback()
        raise


def transaction(body: Plan[T]) -> Plan[T]:
    """`body`, which opens the transaction (BEGIN, or a Pipeline that starts with it),
    then COMMIT; if `body` raises, ROLLBACK and the error."""
    try:
        out = yield from body
    except GeneratorExit:  # a plan closed unfinished asks for nothing more
        raise
    except BaseException:  # cancellation too: the transaction must not stay open
        yield from rollback()
        raise
    yield from commit()
    return out


def write(t: Target, what: str, body: Plan[T], confirm: Callable[[], Plan[T]]) -> Plan[T]:
    """`body` (one autocommitted statement, or a `transaction`). If the connection broke
    while it ran, its commit is unknown: `confirm()` re-reads from a fresh connection
    what it would have left, and answers for it (or raises `not_applied`)."""
    backend = yield BACKEND
    try:
        return (yield from body)
    except psycopg.OperationalError as err:
        if not (yield BROKEN):
            raise
        lost = err
    return (yield from reconcile(t, what, lost, confirm(), backend))


def reconcile(
    t: Target, what: str, lost: BaseException, confirm: Plan[T], backend: int | None
) -> Plan[T]:
    """After `lost` broke the connection during `what`: wait for the server process that
    ran it (`backend`) to end, then `confirm` on a fresh connection.

    The wait comes first because a client's broken socket does not stop the server: a
    COMMIT already sent, or a one-statement write still waiting for a row lock, may
    commit after a re-read that came too early, which would then report "not applied"
    for a write that lands. Once that process is gone, its transaction has committed
    or rolled back for good. If it outlives the bound, or the re-read fails too, the
    outcome is unknown: a TransientStoreError says so."""
    yield Fresh(f"{what} (reconcile)")
    log.warning("connection lost during %s; reconciling from a fresh connection", what)
    try:
        if backend and not (yield from ended(backend)):
            raise TransientStoreError(
                f"{what}: the connection was lost while committing, and its server process "
                f"{backend} was still running {ENDED_POLLS * ENDED_PAUSE:g} s later; the "
                "outcome is unknown, re-read the jobs before retrying"
            ) from lost
        return (yield from confirm)
    except psycopg.Error as err:
        raise TransientStoreError(
            f"{what}: the connection was lost while committing and re-reading failed "
            f"({translate(t.settings, err, what)}); the outcome is unknown, re-read the "
            "jobs before retrying"
        ) from lost


def ended(backend: int) -> Plan[bool]:
    """Whether server process `backend` is gone, polled for a bounded time (each poll its
    own autocommitted statement: `pg_stat_activity` is a snapshot per transaction). A
    process id reused by another session only makes the wait run to its bound."""
    for _ in range(ENDED_POLLS):
        rows = yield Run("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend,))
        if rows[0][0] == 0:
            return True
        yield Run("SELECT pg_sleep(%s)", (ENDED_PAUSE,), fetch=False)
    return False


def confirmed(t: Target, decisions: Sequence[Decision]) -> Plan[set[str]]:
    """Ids whose decision shows in the store: the row equal to it, or its audit entry."""
    rows = yield Run(t.sql.get_many, ([d.job.id for d in decisions],))
    stored = {job.id: job for job in map(job_from_values, rows)}
    out = set()
    for d in decisions:
        if stored.get(d.job.id) == d.job:
            out.add(d.job.id)
        elif (e := d.entry) is not None:
            found = yield Run(
                t.sql.has_entry, (e.job_id, e.version, e.at, e.event, e.fence, e.data_json)
            )
            if found and found[0][0] > 0:
                out.add(d.job.id)
    return out


def confirm(t: Target, decisions: Sequence[Decision], what: str) -> Plan[set[str]]:
    """`confirmed`, or `not_applied` when none of `decisions` shows."""
    out = yield from confirmed(t, decisions)
    if not out:
        raise not_applied(t, what)
    return out
