"""fsm.contrib.django's setting (JOBFSM), its commands and its staff page."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from jobsite.jobs import handlers

from fsm.contrib.django import config, get_engine, setup_child, submit
from fsm.contrib.django.conf import database_store_url, store_url_of
from fsm.contrib.django.management.run import (
    prepare_children,
    without_django_options,
    worker_args,
)

from .conftest import ENV, PROJECT, worker_env


def _manage(*args: str, alias: str = "default") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=worker_env(alias),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- the setting -------------------------------------------------------------------


def test_the_store_url_is_derived_from_the_connection_of_the_alias() -> None:
    assert store_url_of("default") == f"sqlite:///{ENV['JOBSITE_SQLITE']}"
    pg = f"postgresql://postgres@{ENV['JOBSITE_PG_HOST']}:{ENV['JOBSITE_PG_PORT']}"
    assert store_url_of("pg") == f"{pg}/{ENV['JOBSITE_PG']}"


def test_an_explicit_store_url_wins() -> None:
    with override_settings(JOBFSM={"STORE": "sqlite:///elsewhere.db"}):
        assert config().store == "sqlite:///elsewhere.db"


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"STOER": "x"}, "unknown key(s) 'STOER'"),
        ({"DATABASE": "nope"}, "no database alias 'nope'"),
        ({"KINDS": {"k": {"max_attempts": 0}}}, "JOBFSM['KINDS']['k']: max_attempts"),
        ({"KINDS": {"k": {"colour": 1}}}, "JOBFSM['KINDS']['k']"),
        ({"WORKER_ARGS": "--concurrency 2"}, "WORKER_ARGS'] must be a list of strings"),
        ({"CHILD_ENV": 3}, "CHILD_ENV'] must be a list of strings"),
        ({"STRICT_KINDS": "yes"}, "STRICT_KINDS'] must be True or False"),
        ({"HANDLERS": ""}, "HANDLERS'] must be a non-empty string"),
        ([], "JOBFSM must be a dict"),
    ],
)
def test_a_bad_setting_is_refused_by_name(value: object, named: str) -> None:
    with override_settings(JOBFSM=value), pytest.raises(ImproperlyConfigured) as err:
        config()
    assert named in str(err.value)


def test_sqlite_in_memory_and_other_backends_have_no_store_url() -> None:
    memory = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    with pytest.raises(ImproperlyConfigured, match="in memory"):
        database_store_url("default", memory)
    with pytest.raises(ImproperlyConfigured, match=r"uses 'django.db.backends.mysql'"):
        database_store_url("default", {"ENGINE": "django.db.backends.mysql", "NAME": "shop"})


def test_a_password_and_an_ipv6_host_are_quoted_in_the_derived_url() -> None:
    params = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "p@ss/word",
        "HOST": "::1",
        "PORT": 5433,
    }
    assert database_store_url("x", params) == "postgresql://app:p%40ss%2Fword@[::1]:5433/shop"


# --- the commands ------------------------------------------------------------------


def test_jobfsm_worker_takes_app_store_and_worker_args_from_the_settings() -> None:
    args = worker_args(["--concurrency", "8"])
    assert args == [
        "--app",
        "jobsite.jobs:handlers",
        "--store",
        config().store,
        *settings.JOBFSM["WORKER_ARGS"],
        "--concurrency",
        "8",  # given last: it wins over WORKER_ARGS' --concurrency 2
    ]


def test_process_children_keep_the_settings_module_and_set_django_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBFSM_CHILD_ENV", "MINE")
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    prepare_children(["--app", "elsewhere:handlers", "--app=jobsite.jobs:handlers"])
    # the children keep the settings module and JOBFSM['CHILD_ENV'], besides what was kept
    assert os.environ["JOBFSM_CHILD_ENV"] == "MINE,DJANGO_SETTINGS_MODULE,JOBSITE_*"
    # and the handlers of the last --app (which declare no child_init) set Django up
    assert handlers.hooks.child_init is setup_child


def test_manage_pys_own_options_are_not_passed_to_the_worker() -> None:
    given = ["--settings", "x.y", "--pythonpath=/p", "--concurrency", "2", "--settings=z"]
    assert without_django_options(given) == ["--concurrency", "2"]


def test_manage_py_jobfsm_worker_help_is_the_worker_commands_help() -> None:
    done = _manage("jobfsm_worker", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage: manage.py jobfsm_worker [OPTIONS]" in done.stdout
    assert "--concurrency" in done.stdout
    assert "--ready-file" in done.stdout


def test_manage_py_jobfsm_worker_without_handlers_says_what_to_set() -> None:
    env = worker_env("default")
    env["DJANGO_SETTINGS_MODULE"] = "jobsite.no_handlers"
    done = subprocess.run(
        [sys.executable, "manage.py", "jobfsm_worker"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "set JOBFSM['HANDLERS'] = 'module:obj'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_worker_option_is_refused_as_jobfsm_worker_refuses_it() -> None:
    done = _manage("jobfsm_worker", "--concurrency", "0")
    assert done.returncode == 2
    assert done.stderr.startswith("error: Invalid value for '--concurrency'")
    assert "manage.py jobfsm_worker --help" in done.stderr


def test_manage_py_jobfsm_migrate_creates_the_schema(tmp_path: Path) -> None:
    env = worker_env("default")
    env["JOBSITE_SQLITE"] = str(tmp_path / "fresh.db")
    done = subprocess.run(
        [sys.executable, "manage.py", "jobfsm_migrate"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "fresh.db: schema at version" in done.stdout
    with sqlite3.connect(tmp_path / "fresh.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"jobs", "job_events"} <= tables


# --- the staff page ----------------------------------------------------------------


@pytest.mark.parametrize("site", ["sqlite"], indirect=True)
def test_the_staff_page_shows_counts_and_links_the_dashboard(site: str) -> None:
    submit("order.confirm", {"order": 1})
    submit("order.confirm", {"order": 2})
    User.objects.create_user("ops", password="pw", is_staff=True)
    User.objects.create_user("customer", password="pw")
    client = Client()
    # anonymous, and a user who is not staff: sent to the login page
    assert client.get("/jobs/").status_code == 302
    client.login(username="customer", password="pw")
    assert client.get("/jobs/")["Location"].startswith("/login/")
    # staff: the counts by queue and state, and the dashboard's link
    client.login(username="ops", password="pw")
    page = client.get("/jobs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<tr><td>default</td><td>queued</td><td>2</td></tr>" in html
    assert '<a href="http://127.0.0.1:8080/">Open the jobfsm dashboard</a>' in html
    assert get_engine().counts() == {("default", "queued"): 2}
