"""Throwaway stores for the benchmarks: a temporary SQLite file or a fresh PostgreSQL database."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PG_ADMIN = os.environ.get("JOBFSM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_database() -> tuple[str, str]:
    """Create an empty PostgreSQL database; return (name, URL)."""
    import psycopg

    name = f"jobfsm_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_server_settings() -> dict[str, Any]:
    """The PostgreSQL server's version and the settings that govern commit durability."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('server_version', 'synchronous_commit', 'fsync', 'wal_sync_method')"
        ).fetchall()
    return {f"postgresql {name}": setting for name, setting in rows}


@contextmanager
def fresh_database() -> Iterator[str]:
    name, url = create_database()
    try:
        yield url
    finally:
        drop_database(name)


@contextmanager
def fresh_store_url(kind: str, folder: Path | None = None) -> Iterator[str]:
    """A store URL of `kind` ("sqlite" or "postgres") that nothing else uses."""
    if kind != "sqlite":
        with fresh_database() as url:
            yield url
        return
    if folder is not None:
        path = folder / f"bench-{uuid.uuid4().hex[:8]}.db"
        try:
            yield f"sqlite:///{path}"
        finally:  # a 1M-row file should not wait for the folder's removal
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/bench.db"
