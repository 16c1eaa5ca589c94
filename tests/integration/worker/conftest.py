"""Fixtures for the worker integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm import Engine

from .app import handlers
from .helpers import Workers, engine_factory


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
    yield from engine_factory(handlers)


@pytest.fixture
def hooks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder the hooks of tests/integration/worker/hooks_app.py write their marks to."""
    folder = tmp_path / "hooks"
    folder.mkdir()
    monkeypatch.setenv("HOOKS_DIR", str(folder))
    return folder
