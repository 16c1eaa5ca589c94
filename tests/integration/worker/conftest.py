"""Fixtures for the worker integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm import Engine, open_store

from .app import handlers
from .helpers import Workers


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url: str = request.getfixturevalue("sqlite_url")
    else:
        url = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def open_engine() -> Iterator[Callable[[str], Engine]]:
    """Engines that submit with the app's kind defaults; their stores close after the test."""
    engines: list[Engine] = []

    def make(url: str) -> Engine:
        engine = Engine(open_store(url), kinds={k: spec.policy for k, spec in handlers.items()})
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.store.close()
