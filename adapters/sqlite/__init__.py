"""The SQLite store (`sqlite:///path.db`): the embedded default, zero setup.

One file holds the jobs and their audit trail. Several threads and several
worker processes on one host may share the file: every read-then-write runs
inside `BEGIN IMMEDIATE` (one writer at a time, others wait up to the busy
timeout), and the journal is in WAL mode so readers never block the writer.
"""

from __future__ import annotations

from .schema import MIGRATIONS, SCHEMA_VERSION
from .store import SqliteStore, open_store
from .url import SqliteOptions, parse_url

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SqliteOptions",
    "SqliteStore",
    "open_store",
    "parse_url",
]
