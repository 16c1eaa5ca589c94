"""Transactional submit through SQLAlchemy: `conn=session` / `conn=connection`.

The job is written in the session's (or connection's) own transaction: it exists
when the application commits and is gone when it rolls back, with the order row it
belongs to. Blocking SQLAlchemy on SQLite and PostgreSQL; asyncio SQLAlchemy on
PostgreSQL (`postgresql+psycopg`), and refused by name on SQLite (aiosqlite's
connection lives on a thread of its own).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from fsm import AsyncEngine, Engine, open_store
from fsm.errors import BadInput, JobNotFound

ORDERS = "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)"
ORDER = sa.text("INSERT INTO orders (id, total) VALUES (:id, 100)")


@pytest.fixture(params=["sqlite", "postgres"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(the store's URL, SQLAlchemy's URL for the same database)."""
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        store_url, sa_url = f"sqlite:///{path}", f"sqlite:///{path}"
    else:
        store_url = request.getfixturevalue("pg_url")
        sa_url = store_url.replace("postgresql://", "postgresql+psycopg://", 1)
    open_store(store_url).close()  # the schema
    db = sa.create_engine(sa_url)
    with db.begin() as conn:
        conn.execute(sa.text(ORDERS))
    db.dispose()
    return store_url, sa_url


def _orders(db: sa.Engine) -> int:
    with db.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM orders")).scalar_one())


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_a_submit_on_a_session_commits_and_rolls_back_with_the_session(
    urls: tuple[str, str], commit: bool
) -> None:
    store_url, sa_url = urls
    store = open_store(store_url)
    db = sa.create_engine(sa_url)
    try:
        engine = Engine(store)
        # given an order written in a SQLAlchemy Session, and its job submitted on it
        with Session(db) as session:
            session.execute(ORDER, {"id": "o-1"})
            job = engine.submit("order.confirm", {"order": "o-1"}, conn=session)
            # when the session commits (or rolls back)
            if commit:
                session.commit()
            else:
                session.rollback()
        # then the job and its audit entry exist exactly when the order does
        stored = store.get(job.id)
        assert (stored is not None, _orders(db)) == (commit, int(commit))
        assert len(store.history(job.id)) == int(commit)
    finally:
        db.dispose()
        store.close()


def test_a_submit_on_a_connection_joins_its_transaction(urls: tuple[str, str]) -> None:
    store_url, sa_url = urls
    store = open_store(store_url)
    db = sa.create_engine(sa_url)
    try:
        engine = Engine(store)
        with db.connect() as conn:
            with conn.begin():
                conn.execute(ORDER, {"id": "o-2"})
                kept = engine.submit("order.confirm", {"order": "o-2"}, conn=conn)
            tx = conn.begin()
            dropped = engine.submit_many([("order.confirm", {"n": 1}, {})], conn=conn)[0]
            tx.rollback()
        assert store.get(kept.id) is not None
        assert store.get(dropped.id) is None
        assert _orders(db) == 1
    finally:
        db.dispose()
        store.close()


def test_an_asyncio_sqlalchemy_object_is_refused_by_the_blocking_engine(
    sqlite_url: str,
) -> None:
    store = open_store(sqlite_url)
    adb = create_async_engine("sqlite+aiosqlite:///:memory:")
    try:
        with pytest.raises(BadInput, match="AsyncSession joins through the AsyncEngine"):
            Engine(store).submit("k", conn=AsyncSession(adb))
    finally:
        asyncio.run(adb.dispose())
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_a_submit_on_an_async_session_commits_and_rolls_back_with_it(
    pg_url: str, commit: bool
) -> None:
    open_store(pg_url).close()
    sa_url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)

    async def scenario() -> tuple[bool, int, int]:
        adb = create_async_engine(sa_url)
        try:
            async with adb.begin() as conn:
                await conn.execute(sa.text(ORDERS))
            async with await AsyncEngine.open(pg_url) as engine:
                async with AsyncSession(adb) as session:
                    await session.execute(ORDER, {"id": "o-3"})
                    job = await engine.submit("order.confirm", {"order": "o-3"}, conn=session)
                    await (session.commit() if commit else session.rollback())
                async with adb.connect() as conn, conn.begin() as tx:
                    other = await engine.submit("order.audit", {"n": 1}, conn=conn)
                    await (tx.commit() if commit else tx.rollback())
                found = [await _exists(engine, j) for j in (job.id, other.id)]
            async with adb.connect() as conn:
                orders = (await conn.execute(sa.text("SELECT count(*) FROM orders"))).scalar_one()
            return found[0], int(found[1]), int(orders)
        finally:
            await adb.dispose()

    assert asyncio.run(scenario()) == (commit, int(commit), int(commit))


async def _exists(engine: AsyncEngine, job_id: str) -> bool:
    try:
        await engine.get(job_id)
    except JobNotFound:
        return False
    return True


def test_an_async_session_over_aiosqlite_is_refused_by_name(sqlite_url: str) -> None:
    open_store(sqlite_url).close()
    path = sqlite_url.removeprefix("sqlite:///")

    async def scenario() -> Any:
        adb = create_async_engine(f"sqlite+aiosqlite:///{path}")
        try:
            async with await AsyncEngine.open(sqlite_url) as engine, AsyncSession(adb) as session:
                with pytest.raises(BadInput) as refused:
                    await engine.submit("k", conn=session)
                return refused.value
        finally:
            await adb.dispose()

    message = str(asyncio.run(scenario()))
    assert "aiosqlite" in message
    assert "a blocking Session" in message
