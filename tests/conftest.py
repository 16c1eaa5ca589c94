"""Shared fixtures: real SQLite files, a fresh PostgreSQL database, the RabbitMQ broker.

In CI (CI=true) a missing service is a failure; elsewhere the test is skipped and
says why.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm.testing.profiles import load_profile

load_profile()

IN_CI = bool(os.environ.get("CI"))
PG_ADMIN_URL = os.environ.get("JOBFSM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
RABBIT_URL = os.environ.get("JOBFSM_TEST_RABBIT", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def need_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (.ci/run starts it)")
    pytest.skip(f"{message}; start it to run this test (CI never skips it)")


def need_program(name: str, install: str) -> None:
    """A system program a test needs (.ci/run installs it): a failure in CI, a skip elsewhere."""
    if shutil.which(name) is not None:
        return
    message = f"`{name}` is not installed ({install})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (.ci/run installs it)")
    pytest.skip(f"{message}; install it to run this test (CI never skips it)")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture(scope="session")
def pg_server() -> str:
    need_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_ADMIN_URL


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database for one test, dropped afterwards."""
    import psycopg

    name = f"jobfsm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def rabbit_url() -> str:
    need_service("RabbitMQ", "127.0.0.1", 5672)
    return RABBIT_URL
