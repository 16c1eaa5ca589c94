"""Unique submits through every path that submits: the AsyncEngine (PostgreSQL's
asyncio store, SQLite on threads), the caller's transaction (`conn=`, blocking and
asyncio), and the CLI, on a real SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fsm import AsyncEngine, DuplicateJob, Engine, Unique, open_store
from fsm.errors import BadInput


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


def _connect(url: str) -> Any:
    if url.startswith("sqlite"):
        return sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)
    return psycopg.connect(url)


def _count(engine: Engine) -> int:
    return sum(engine.store.counts().values())


def test_the_async_engine_returns_the_job_in_scope_and_refuses_by_name(store_url: str) -> None:
    engine = Engine(open_store(store_url))

    async def main() -> tuple[Any, ...]:
        async with AsyncEngine(engine) as aengine:
            first = await aengine.submit("sync.shop", {"shop": 1}, unique="shop-1")
            again = await aengine.submit("sync.shop", {"shop": 1}, unique="shop-1")
            batch = await aengine.submit_many(
                [("sync.shop", {}, {"unique": "shop-2"}), ("sync.shop", {}, {"unique": "shop-2"})]
            )
            try:
                await aengine.submit(
                    "sync.shop", {}, unique=Unique("shop-1", on_duplicate="refuse")
                )
            except DuplicateJob as err:
                refused = err.job.id
            return first, again, batch, refused

    try:
        # given an AsyncEngine; when a key is submitted twice, in a batch, and refused
        first, again, batch, refused = asyncio.run(main())
        # then one job per key, and the refusal names the job that holds the key
        assert again.id == first.id
        assert batch[0].id == batch[1].id != first.id
        assert refused == first.id
        assert _count(engine) == 2
    finally:
        engine.store.close()


def test_a_submit_in_the_callers_transaction_sees_committed_jobs_and_its_own(
    store_url: str,
) -> None:
    engine = Engine(open_store(store_url))
    committed = engine.submit("sync.shop", {}, unique="shop-1")
    conn = _connect(store_url)
    try:
        # when the caller's transaction submits the committed key and a new one twice
        dup = engine.submit("sync.shop", {}, unique="shop-1", conn=conn)
        mine = engine.submit("sync.shop", {}, unique="shop-3", conn=conn)
        mine_again = engine.submit("sync.shop", {}, unique="shop-3", conn=conn)
        # then the committed job comes back, and the transaction's own job too
        assert dup.id == committed.id
        assert mine_again.id == mine.id
        # and a rolled-back transaction leaves the key free
        conn.rollback()
        assert engine.store.get(mine.id) is None
        assert engine.submit("sync.shop", {}, unique="shop-3").id != mine.id
    finally:
        conn.close()
        engine.store.close()


@pytest.mark.postgres
def test_a_repeatable_read_transaction_is_refused_and_nothing_is_written(pg_url: str) -> None:
    engine = Engine(open_store(pg_url))
    conn = psycopg.connect(pg_url)
    try:
        before = _count(engine)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(BadInput, match="REPEATABLE READ"):
            engine.submit("sync.shop", {}, unique="shop-1", conn=conn)
        conn.rollback()
        assert _count(engine) == before
        # an ordinary submit without unique= still joins such a transaction
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        job = engine.submit("sync.shop", {}, conn=conn)
        conn.commit()
        assert engine.store.get(job.id) is not None
    finally:
        conn.close()
        engine.store.close()


@pytest.mark.postgres
def test_an_async_connection_joins_a_unique_submit(pg_url: str) -> None:
    engine = Engine(open_store(pg_url))
    committed = engine.submit("sync.shop", {}, unique="shop-1")

    async def main() -> tuple[str, str]:
        async with AsyncEngine(engine) as aengine:
            aconn = await psycopg.AsyncConnection.connect(pg_url)
            try:
                dup = await aengine.submit("sync.shop", {}, unique="shop-1", conn=aconn)
                new = await aengine.submit("sync.shop", {}, unique="shop-4", conn=aconn)
                await aconn.commit()
            finally:
                await aconn.close()
            return dup.id, new.id

    try:
        dup, new = asyncio.run(main())
        assert dup == committed.id
        stored = engine.store.get(new)
        assert stored is not None
        assert stored.unique_key == "shop-4"
    finally:
        engine.store.close()


def test_jobfsm_submit_unique_returns_the_existing_job_and_refuses_by_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def submit(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "fsm.cli", "submit", "sync.shop", "--store", url, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    first = submit("--unique", "shop-1", "--json")
    again = submit("--unique", "shop-1", "--json")
    refused = submit("--unique", "shop-1", "--unique-refuse")
    bad = submit("--unique", "shop-1", "--unique-state", "queued")
    orphan = submit("--unique-period", "60")

    assert first.returncode == 0, first.stderr
    job = json.loads(first.stdout)["job"]
    assert json.loads(again.stdout) == {"existing": True, "job": job}
    assert refused.returncode != 0
    assert job["id"] in refused.stderr
    assert bad.returncode != 0
    assert "unique states" in bad.stderr
    assert orphan.returncode != 0
    assert "--unique KEY" in orphan.stderr
    engine = Engine(open_store(url))
    try:
        assert _count(engine) == 1
    finally:
        engine.store.close()
