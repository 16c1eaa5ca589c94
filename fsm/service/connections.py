"""The caller's connection of a transactional submit (`conn=`), as its driver's.

`Engine.submit(..., conn=...)` takes the database driver's connection (a
`psycopg.Connection`, a `sqlite3.Connection`) or a SQLAlchemy one: a `Session` or a
`Connection`; `AsyncEngine.submit` also an `AsyncSession` or an `AsyncConnection`.
A SQLAlchemy object is unwrapped here, with SQLAlchemy's public API, to the driver
connection of its transaction (a Session begins one if it has none, as its own
first statement would), so the job is written in the very transaction the
session's `commit()` commits (docs/transactional-submit.md). A Django connection
(`django.db.connection`, `connections[alias]`) is unwrapped here too, inside the
`transaction.atomic()` block it is in (docs/django.md).

fsm imports neither SQLAlchemy nor Django: their objects are recognized by the module
of their class, as `fsm.service.aio` recognizes psycopg's.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadInput

#: SQLAlchemy classes `conn=` takes, by name: blocking, then asyncio
SYNC_KINDS = ("Session", "scoped_session", "Connection")
ASYNC_KINDS = ("AsyncSession", "async_scoped_session", "AsyncConnection")


def type_name(value: object) -> str:
    """The qualified name of `value`'s type, as an error about a wrong `conn=` names it:
    `sqlite3.Connection`, `psycopg.AsyncConnection`, `sqlalchemy.orm.session.Session`
    (a builtin type by its bare name: `str`, `NoneType`)."""
    cls = type(value)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def sqlalchemy_kind(conn: object) -> str | None:
    """The SQLAlchemy class `conn` is one of (`SYNC_KINDS`, `ASYNC_KINDS`), else None."""
    for cls in type(conn).__mro__:
        if cls.__module__.startswith("sqlalchemy.") and cls.__name__ in (SYNC_KINDS + ASYNC_KINDS):
            return cls.__name__
    return None


def driver_connection(conn: Any) -> Any:
    """`conn`, or the driver connection of a blocking SQLAlchemy Session or Connection.

    An asyncio SQLAlchemy object is refused (BadInput): it joins through the
    AsyncEngine, whose `submit` awaits `adriver_connection`."""
    if is_django_connection(conn):
        return django_driver_connection(conn)
    kind = sqlalchemy_kind(conn)
    if kind is None:
        return conn
    if kind in ASYNC_KINDS:
        raise BadInput(
            f"conn=: a SQLAlchemy {kind} joins through the AsyncEngine "
            "(`await aengine.submit(..., conn=...)`); the blocking Engine takes a "
            "Session or a Connection"
        )
    if kind != "Connection":
        conn = conn.connection()  # the session's Connection, in its transaction
    return _driver_of(conn.connection, kind)


async def adriver_connection(conn: Any) -> Any:
    """`conn`, or the driver connection of an asyncio SQLAlchemy AsyncSession or
    AsyncConnection (awaited on the caller's loop). A blocking SQLAlchemy object is
    left as it is: it is unwrapped by `driver_connection` on a thread of the pool."""
    kind = sqlalchemy_kind(conn)
    if kind is None or kind in SYNC_KINDS:
        return conn
    if kind != "AsyncConnection":
        conn = await conn.connection()  # the session's AsyncConnection, in its transaction
    driver = _driver_of(await conn.get_raw_connection(), kind)
    if not type(driver).__module__.startswith("psycopg"):
        raise BadInput(
            f"conn=: the SQLAlchemy {kind} runs on {type_name(driver)}, "
            "which a submit cannot join (an aiosqlite connection lives on a thread of its "
            "own); asyncio SQLAlchemy joins on PostgreSQL (postgresql+psycopg); on SQLite "
            "submit on a blocking Session or Connection"
        )
    return driver


def is_django_connection(conn: object) -> bool:
    """Whether `conn` is a Django database connection (a backend's `DatabaseWrapper`)."""
    return any(
        cls.__module__.startswith("django.db.backends.") and cls.__name__ == "BaseDatabaseWrapper"
        for cls in type(conn).__mro__
    )


def django_driver_connection(conn: Any) -> Any:
    """The driver connection under a Django connection, which must be inside
    `transaction.atomic()`: outside one, Django commits each statement on its own, so
    there is no transaction of the caller's for the job to join (BadInput)."""
    if conn.get_autocommit():  # Django's own view, whatever the driver's flag says
        raise BadInput(
            f"conn=: the Django connection {conn.alias!r} is in autocommit mode: submit "
            f"inside `transaction.atomic(using={conn.alias!r})`, so the job commits and "
            "rolls back with your writes"
        )
    if conn.needs_rollback:  # Django refuses every query in such a block; so does a submit
        raise BadInput(
            f"conn=: the transaction.atomic() block on {conn.alias!r} is marked for rollback "
            "(an error happened in it): nothing can be written in it"
        )
    conn.ensure_connection()
    return conn.connection


def _driver_of(pooled: Any, kind: str) -> Any:
    """The driver connection under SQLAlchemy's pooled connection proxy."""
    driver = pooled.driver_connection
    if driver is None:
        raise BadInput(f"conn=: the SQLAlchemy {kind} holds no open driver connection")
    return driver
