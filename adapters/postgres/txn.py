"""`fsm.ports.JoinsTransactions` for PostgreSQL: insert jobs inside the caller's open
transaction, with the statements the store's own insert runs (`CappedInsert`), as one
plan (`insert_in`) that the blocking store drives on a `psycopg.Connection` and the
asyncio store on a `psycopg.AsyncConnection`.

The insert statement sends its NOTIFY too; PostgreSQL delivers a notification only when
the transaction that sent it commits, so waiting workers wake on the caller's COMMIT and
never for a job that was rolled back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from adapters._rows import check_storable
from fsm.errors import BadInput, TransientStoreError
from fsm.ports import Capacity
from fsm.records import Decision, Job
from fsm.service.connections import type_name

from .inserts import CappedInsert, existing_by_key
from .plan import Plan, Run, Target, translate
from .unique import UniqueLookup, check_isolation, settled

_WHAT = "conn= of a transactional submit"
#: what identifies a store's database, read on the caller's connection and compared
#: with the store's own (`PostgresStore.fingerprint`): its name, the server's start time
#: (one per server process tree) and the oid of the jobs table of the store's schema
FINGERPRINT = "SELECT current_database(), pg_postmaster_start_time(), to_regclass(%s)::oid"
_SAVEPOINT = "jobfsm_insert"


class TupleRows:
    """The caller's connection, read as tuples whatever its row factory is (blocking or
    asyncio alike: `execute` is the cursor's, awaitable on an AsyncConnection)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, query: Any, params: Any = None) -> Any:
        return self.conn.cursor(row_factory=tuple_row).execute(query, params)


def fingerprint(t: Target) -> Plan[tuple[Any, ...]]:
    """The store's own `FINGERPRINT`, read on its own connection."""
    rows = yield Run(FINGERPRINT, (t.sql.jobs,))
    return tuple(rows[0]) if rows else ()


def joinable(conn: object, kind: type[Any]) -> Any:
    """`conn` if it is a psycopg connection of `kind` (blocking or asyncio) that has a
    transaction the insert can join; BadInput naming the problem otherwise."""
    if not isinstance(conn, kind):
        if kind is psycopg.Connection and isinstance(conn, psycopg.AsyncConnection):
            raise BadInput(
                f"{_WHAT}: an AsyncConnection joins through the AsyncEngine "
                "(`await aengine.submit(..., conn=aconn)`); here pass a psycopg.Connection"
            )
        raise BadInput(
            f"{_WHAT}: the PostgreSQL store needs a psycopg.{kind.__name__}, got {type_name(conn)}"
        )
    refuse_state(conn.closed or conn.broken, conn.info.transaction_status, conn.autocommit)
    return conn


def refuse_state(closed: bool, status: pq.TransactionStatus, autocommit: bool) -> None:
    """BadInput unless the caller's connection has a transaction the insert can join."""
    if closed:
        raise BadInput(f"{_WHAT}: the psycopg connection is closed")
    if status == pq.TransactionStatus.INERROR:
        raise BadInput(f"{_WHAT}: the caller's transaction has failed; roll it back first")
    if status == pq.TransactionStatus.ACTIVE:
        raise BadInput(f"{_WHAT}: the connection is busy running another statement")
    if status == pq.TransactionStatus.IDLE and autocommit:
        raise BadInput(
            f"{_WHAT}: the connection is in autocommit mode with no transaction open, so "
            "the job would commit at once; submit inside `with conn.transaction():`"
        )


def insert_in(
    t: Target,
    decisions: Sequence[Decision],
    capacity: Capacity | None,
    mine: tuple[Any, ...],
) -> Plan[list[Job]]:
    """`JoinsTransactions.insert_in`, on the caller's connection (`TupleRows`): check it
    is to this store (`mine`: the store's `fingerprint`), then the insert's statements
    in a savepoint of the caller's transaction; never commits."""
    if not decisions:
        return []
    check_storable((d.job for d in decisions), (d.entry for d in decisions))
    try:
        # on a non-autocommit connection this begins the transaction the insert joins
        theirs = yield Run(FINGERPRINT, (t.sql.jobs,))
        _same_store(t, theirs[0] if theirs else None, mine)
        lookup = UniqueLookup(t.sql, t.settings.schema, decisions)
        if lookup.unique:
            level = yield Run("SELECT current_setting('transaction_isolation')")
            check_isolation(str(level[0][0]))
        yield Run(f"SAVEPOINT {_SAVEPOINT}", fetch=False)
        try:
            rest: Sequence[Decision] = decisions
            twins: dict[str, Job] = {}
            if lookup.unique:  # the locks first, then the finds (adapters/postgres/unique.py)
                rows = []
                for sql, params in lookup.statements:
                    rows.append((yield Run(sql, params)))
                twins, rest = lookup.resolve(rows)
            capped = CappedInsert(t.sql, t.settings.schema, t.channel, rest, capacity)
            rows = []
            for sql, params in capped.statements if rest else ():
                rows.append((yield Run(sql, params)))
            inserted = capped.check(rows) if rest else set()
            for sql, params in capped.after(inserted):
                yield Run(sql, params, fetch=False)
            keys, others = _missing_twins(rest, inserted)
            stored = (yield Run(t.sql.by_key, (keys, others))) if others else []
        except GeneratorExit:
            raise
        except BaseException:  # the caller's transaction goes on without the insert
            with contextlib.suppress(psycopg.Error):
                yield Run(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}", fetch=False)
                yield Run(f"RELEASE {_SAVEPOINT}", fetch=False)
            raise
        yield Run(f"RELEASE {_SAVEPOINT}", fetch=False)
    except psycopg.Error as err:
        raise translate(t.settings, err, "insert in the caller's transaction") from err
    return _joined(decisions, inserted, stored, twins)


def _same_store(t: Target, theirs: Sequence[Any] | None, mine: tuple[Any, ...]) -> None:
    if theirs is None or tuple(theirs) != mine:
        db = "?" if theirs is None else theirs[0]
        raise BadInput(
            f"{_WHAT}: the connection is to database {db!r} "
            f"{'without' if theirs is None or theirs[2] is None else 'with another'} "
            f"jobfsm schema {t.settings.schema!r}, not to this store ({t.settings.redacted})"
        )


def _joined(
    decisions: Sequence[Decision],
    ids: set[str],
    stored: Sequence[Sequence[Any]],
    twins: dict[str, Job],
) -> list[Job]:
    """The jobs of an insert in the caller's transaction, in order: the new ones, the
    jobs unique scopes held (`twins`), or the stored twins (`stored`: rows of
    `Statements.by_key`) of duplicate keys or ids."""
    found = existing_by_key(stored)
    out = []
    for d in decisions:
        if d.job.id in ids:
            out.append(d.job)
            continue
        if d.job.id in twins:
            out.append(twins[d.job.id])
            continue
        key = d.job.idempotency_key
        twin = (found.get(("key", key)) if key is not None else None) or found.get(("id", d.job.id))
        if twin is None:
            raise TransientStoreError(
                f"insert of job {d.job.id}: its idempotency key's job vanished (pruned) "
                "while it was inserted; roll back and retry"
            )
        out.append(twin)
    return settled(decisions, out)


def _missing_twins(decisions: Sequence[Decision], ids: set[str]) -> tuple[list[str], list[str]]:
    """(idempotency keys, ids) of the jobs an insert did not write: `Statements.by_key`'s
    parameters, to read their stored twins."""
    missing = [d for d in decisions if d.job.id not in ids]
    keys = [d.job.idempotency_key for d in missing if d.job.idempotency_key]
    return keys, [d.job.id for d in missing]
