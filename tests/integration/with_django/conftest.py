"""Django's own test machinery inside pytest, for the tests of fsm.contrib.django.

`django.test.utils` (what Django's DiscoverRunner calls) rather than pytest-django: the
plugin would load for the whole suite and wants its settings at pytest's start, while
one directory needs Django. Here: the test project `project/jobsite` is set up once per
process (environment, then `django.setup()`), and the `site` fixture has Django's
`setup_databases` create the test database of one alias (SQLite or PostgreSQL, with
Django's and the project's tables), runs `manage.py jobfsm_migrate` on it, and has
`teardown_databases` drop it after the test.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import PG_ADMIN_URL

PROJECT = Path(__file__).resolve().parent / "project"
_name = f"jobfsm_django_{uuid.uuid4().hex[:10]}"
#: this process's SQLite files (made by the first test that needs them, removed at exit)
SCRATCH = Path(tempfile.gettempdir()) / _name
_pg = urlsplit(PG_ADMIN_URL)
#: the environment the project's settings read (also a worker process's, plus its alias)
ENV = {
    "JOBSITE_SQLITE": str(SCRATCH / "site.db"),
    "JOBSITE_SQLITE_TEST": str(SCRATCH / "test_site.db"),
    "JOBSITE_PG": _name,
    "JOBSITE_PG_TEST": f"test_{_name}",
    "JOBSITE_PG_HOST": _pg.hostname or "127.0.0.1",
    "JOBSITE_PG_PORT": str(_pg.port or 5432),
    "JOBSITE_PG_USER": _pg.username or "postgres",
}
SETTINGS = {**ENV, "DJANGO_SETTINGS_MODULE": "jobsite.settings"}
sys.path.insert(0, str(PROJECT))

import django  # noqa: E402


def _setup() -> None:
    """`django.setup()` with the environment the settings read, which is then taken away:
    the settings are loaded, and no other test's subprocess inherits a
    DJANGO_SETTINGS_MODULE (celery, for one, would try to load it)."""
    saved = {key: os.environ.get(key) for key in SETTINGS}
    os.environ.update(SETTINGS)
    try:
        django.setup()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_setup()

from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test.utils import (  # noqa: E402
    override_settings,
    setup_databases,
    setup_test_environment,
    teardown_databases,
    teardown_test_environment,
)

from fsm.contrib.django import close_engine  # noqa: E402

#: the database alias of each parameter of `site`
ALIASES = {"sqlite": "default", "postgres": "pg"}


@pytest.fixture(scope="session", autouse=True)
def django_test_environment() -> Iterator[None]:
    SCRATCH.mkdir(exist_ok=True)
    setup_test_environment()
    try:
        yield
    finally:
        teardown_test_environment()
        shutil.rmtree(SCRATCH, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def site(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    """A fresh test database of one alias, with the jobfsm schema, which JOBFSM submits on;
    yields the alias."""
    if request.param == "postgres":
        request.getfixturevalue("pg_server")  # skipped (or failed in CI) without PostgreSQL
    alias = ALIASES[request.param]
    old = setup_databases(verbosity=0, interactive=False, aliases={alias}, serialized_aliases=set())
    try:
        from django.conf import settings

        with override_settings(JOBFSM={**settings.JOBFSM, "DATABASE": alias}):
            call_command("jobfsm_migrate")
            assert "schema at version" in capsys.readouterr().out
            yield alias
    finally:
        close_engine()  # its connections would keep the test database from being dropped
        connections.close_all()
        teardown_databases(old, verbosity=0)


def worker_env(alias: str) -> dict[str, str]:
    """A worker process's environment: the project's settings with the test database of
    `alias` as its database (no test runner renames it there)."""
    env = dict(os.environ, **SETTINGS, JOBSITE_DATABASE=alias)
    env["JOBSITE_SQLITE"] = ENV["JOBSITE_SQLITE_TEST"]
    env["JOBSITE_PG"] = ENV["JOBSITE_PG_TEST"]
    return env
