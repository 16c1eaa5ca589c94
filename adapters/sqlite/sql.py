"""SQL text and row helpers of the SQLite store, and its error translation.

Everything here is prepared outside a write transaction: the store enters
`BEGIN IMMEDIATE` with its statements and parameters ready.
"""

from __future__ import annotations

import functools
import operator
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import compress
from operator import ne
from typing import Any

from fsm.errors import SchemaError, StoreError, TransientStoreError
from fsm.records import AuditEntry, Decision, Job, Owner

from ..rows import AUDIT_COLUMNS, JOB_COLUMNS, owner_to_text
from .schema import in_list

JOB_COLS = ", ".join(JOB_COLUMNS)
JOB_MARKS = ", ".join("?" for _ in JOB_COLUMNS)
AUDIT_COLS = ", ".join(AUDIT_COLUMNS)
_AUDIT_MARKS = ", ".join("?" for _ in AUDIT_COLUMNS)
#: ids per `IN (...)` list (prune); renew and save_progress bind 2 or 3 values per
#: row in chunks of 10 x this: every statement stays under SQLite's default limit of
#: 32766 bound variables.
CHUNK = 500
_TRANSIENT = ("locked", "busy")
#: how many times one claim looks again past jobs the core refused to lease
CLAIM_ROUNDS = 4
#: the file mode of a database file jobfsm creates (its -wal and -shm files follow it)
FILE_MODE = 0o600
_SCHEMA = ("no such table", "no such column", "has no column")


_OWNER_AT = JOB_COLUMNS.index("owner")
_VERSION_AT = JOB_COLUMNS.index("version")
_SET_AT = range(1, len(JOB_COLUMNS))  # every column but `id` (a decision keeps its job's id)


@functools.lru_cache(maxsize=1024)
def _owner_text(owner: Owner) -> str | None:
    return owner_to_text(owner)


#: a record's values in column order, read in C (one attrgetter call per record)
_job_tuple = operator.attrgetter(*JOB_COLUMNS)


def job_values(job: Job) -> list[Any]:
    """The row of `job` in `JOB_COLUMNS` order (as `adapters.rows.job_to_row` maps it)."""
    values = list(_job_tuple(job))
    if job.owner is not None:
        values[_OWNER_AT] = _owner_text(job.owner)
    return values


@functools.lru_cache(maxsize=256)  # bounded: a transition changes one of a few column sets
def _update_sql(changed: tuple[int, ...]) -> str:
    """The compare-and-set of the columns at the indexes `changed` (of JOB_COLUMNS)."""
    sets = ", ".join(f"{JOB_COLUMNS[i]} = ?" for i in changed)
    return f"UPDATE jobs SET {sets} WHERE id = ? AND version = ?"


def _changed(d: Decision) -> tuple[tuple[int, ...], list[Any]]:
    """The indexes (of JOB_COLUMNS) of the columns `d` changes, and their new values.

    Only these need setting: every write bumps `version`, so a row at
    `d.previous.version` holds exactly `d.previous`, and setting the changed
    columns leaves the row equal to `d.job`. (Setting every column would
    rewrite every index entry of the row, unchanged or not.)
    """
    assert d.previous is not None
    new, old = _job_tuple(d.job), _job_tuple(d.previous)
    changed = tuple(compress(_SET_AT, map(ne, new[1:], old[1:])))
    if _VERSION_AT not in changed:  # a decision always bumps it; never rely on it here
        changed = tuple(sorted((*changed, _VERSION_AT)))
    values = [new[i] for i in changed]
    if d.job.owner is not None and _OWNER_AT in changed:
        values[changed.index(_OWNER_AT)] = _owner_text(d.job.owner)
    return changed, values


def cas_statement(d: Decision) -> tuple[str, list[Any]]:
    """The compare-and-set writing `d.job` over `d.previous` (made before BEGIN),
    setting the columns the decision changed (`_changed`)."""
    assert d.previous is not None
    changed, values = _changed(d)
    return _update_sql(changed), [*values, d.job.id, d.previous.version]


def cas_groups(decisions: Sequence[Decision]) -> list[tuple[str, list[list[Any]]]]:
    """The compare-and-set of each decision (`cas_statement`), grouped by the
    columns they change: (statement, one parameter row per decision), each group
    for one `executemany` (made before BEGIN).

    One statement run many times costs SQLite less per row than one multi-row
    `UPDATE ... FROM (VALUES ...)`, which joins into a temporary table first.
    """
    groups: dict[tuple[int, ...], list[list[Any]]] = {}
    for d in decisions:
        assert d.previous is not None
        changed, values = _changed(d)
        values += (d.job.id, d.previous.version)
        groups.setdefault(changed, []).append(values)
    return [(_update_sql(changed), rows) for changed, rows in groups.items()]


#: an audit entry's values in column order, read in C
audit_values: Callable[[AuditEntry], tuple[Any, ...]] = operator.attrgetter(*AUDIT_COLUMNS)


AUDIT_INSERT = f"INSERT INTO job_events ({AUDIT_COLS}) VALUES ({_AUDIT_MARKS})"
#: record(): an entry of an existing job; a rejected one unless its (event, fence) is there
_AT = {c: f"?{i}" for i, c in enumerate(AUDIT_COLUMNS, start=1)}
RECORD = (
    f"INSERT INTO job_events ({AUDIT_COLS}) SELECT {', '.join(_AT.values())} "
    f"WHERE EXISTS (SELECT 1 FROM jobs WHERE id = {_AT['job_id']})"
)
RECORD_REJECTED = (
    f"{RECORD} AND NOT EXISTS (SELECT 1 FROM job_events WHERE job_id = {_AT['job_id']} "
    f"AND outcome = 'rejected' AND event = {_AT['event']} AND fence = {_AT['fence']})"
)


@functools.lru_cache(maxsize=16)
def waiting_sql(states: tuple[str, ...]) -> str:
    """Count a queue's waiting jobs (`states`), stopping after `?` rows (index only)."""
    return (
        "SELECT COUNT(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_queue_state "
        f"WHERE queue = ? AND state IN {in_list(states)} LIMIT ?)"
    )


def create_private(path: str) -> None:
    """Create the database file readable by its owner only, before SQLite opens it.

    SQLite gives the -wal and -shm files the mode of the database file, so the
    three stay private (0600). An existing file, or a symlink, is left as it is.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError:
        return  # it exists, or SQLite reports why it cannot open it (missing directory, ...)
    os.close(fd)


@contextmanager
def translated(path: str, what: str) -> Iterator[None]:
    """Translate sqlite3 errors into the jobfsm store errors, naming the file and call."""
    try:
        yield
    except sqlite3.OperationalError as err:
        text = str(err).lower()
        if any(word in text for word in _TRANSIENT):
            raise TransientStoreError(
                f"SQLite store {path}: {what}: {err} (another connection holds the write "
                "lock, perhaps a writer stopped inside its transaction; nothing was written, "
                "retry later)"
            ) from err
        if any(word in text for word in _SCHEMA):
            raise SchemaError(
                f"SQLite store {path}: {what}: {err} (run `jobfsm migrate` or reopen the store)"
            ) from err
        raise StoreError(f"SQLite store {path}: {what}: {err}") from err
    except sqlite3.Error as err:
        raise StoreError(f"SQLite store {path}: {what}: {err}") from err
