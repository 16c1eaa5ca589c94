"""A process executor's children start without the worker's credentials: a hostile
handler looks for them everywhere in its own process (os.environ, posix.environ, the C
library's getenv, /proc/self/environ) and finds none; allowed names stay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.child_env import DEFAULT_CHILD_ENV, child_allow_list
from adapters.executors import ProcessExecutor
from fsm import Engine, open_store
from fsm.service.identity import Identity
from fsm.worker import Worker

from . import hooks_app
from .helpers import REPO, wait_for

SECRETS = {
    "PGPASSWORD": "pg-s3cret-4711",
    "JOBFSM_RABBITMQ_URL": "amqp://svc:amqp-s3cret-4712@broker:5672/%2F",
    "DATABASE_URL": "postgresql://svc:db-s3cret-4713@db/app",
}
NAMES = [*SECRETS, "JOBFSM_STORE", "MYAPP_API_KEY", "PATH"]


def leaked(found: dict[str, Any], secrets: list[str]) -> list[str]:
    """The secrets that appear anywhere in what the handler found."""
    text = json.dumps(found)
    return [s for s in secrets if s in text]


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    store = open_store(sqlite_url)
    try:
        yield Engine(store)
    finally:
        store.close()


def test_a_hostile_handler_in_a_child_finds_none_of_the_workers_credentials(
    engine: Engine, sqlite_url: str, hooks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a worker whose environment holds its store URL, a PostgreSQL password and an
    # AMQP URL, and an API key its handlers are allowed to have
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JOBFSM_STORE", sqlite_url)
    monkeypatch.setenv("MYAPP_API_KEY", "handlers-may-see-this")
    executor = ProcessExecutor(child_env=("HOOKS_DIR", "MYAPP_*"))
    worker = Worker(
        engine,
        hooks_app.handlers,
        executor=executor,
        concurrency=1,
        poll_interval=0.05,
        install_signals=False,
        identity=Identity(),
    )
    job = engine.submit("hooks.snoop", {"names": NAMES})

    # when: the hostile handler runs in a child
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: engine.get(job.id).state == "succeeded", 60, "the snoop job")
    finally:
        worker.stop()
        t.join(30)
    found = json.loads(engine.get(job.id).result_json or "{}")

    # then: no credential anywhere in the child; the allowed names are there
    assert leaked(found, [*SECRETS.values(), sqlite_url]) == []
    for where in ("environ", "posix"):
        assert not set(found[where]) & {*SECRETS, "JOBFSM_STORE"}, where
        assert found[where]["MYAPP_API_KEY"] == "handlers-may-see-this"
        assert found[where]["PATH"] == os.environ["PATH"]
    assert found["getenv"]["PGPASSWORD"] == ""
    assert found["getenv"]["MYAPP_API_KEY"] == "handlers-may-see-this"
    assert "MYAPP_API_KEY=handlers-may-see-this" in found["startup"]
    # the worker process itself keeps its environment
    assert os.environ["PGPASSWORD"] == SECRETS["PGPASSWORD"]


def test_the_worker_command_starts_children_without_its_store_url_or_passwords(
    sqlite_url: str, hooks_dir: Path, tmp_path: Path
) -> None:
    # given: `jobfsm worker` reading its store from JOBFSM_STORE, with passwords around
    env = dict(os.environ, PYTHONPATH=str(REPO), JOBFSM_STORE=sqlite_url, **SECRETS)
    env["JOBFSM_CHILD_ENV"] = "HOOKS_DIR"
    app = "tests.integration.worker.hooks_app:handlers"
    cmd = [sys.executable, "-m", "fsm.cli", "worker", "--app", app, "--executor", "process"]
    cmd += ["--concurrency", "1", "--poll-interval", "0.1"]
    store = open_store(sqlite_url)
    log = tmp_path / "worker.log"
    try:
        engine = Engine(store)
        job = engine.submit("hooks.snoop", {"names": NAMES})
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            # when: the hostile handler runs
            wait_for(lambda: engine.get(job.id).state == "succeeded", 90, "the snoop job")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        found = json.loads(engine.get(job.id).result_json or "{}")
    finally:
        store.close()

    # then: none of the worker's credentials reached the child
    assert leaked(found, [*SECRETS.values(), sqlite_url]) == [], log.read_text()
    assert "JOBFSM_STORE" not in found["environ"]
    assert found["environ"]["HOOKS_DIR"] == str(hooks_dir)


def test_the_allow_list_takes_patterns_and_refuses_what_is_not_a_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBFSM_CHILD_ENV", " AWS_REGION , ,OTEL_*")

    allow = child_allow_list(["MYAPP_*"])

    assert allow[: len(DEFAULT_CHILD_ENV)] == DEFAULT_CHILD_ENV
    assert allow[len(DEFAULT_CHILD_ENV) :] == ("MYAPP_*", "AWS_REGION", "OTEL_*")
    for bad in ["", "A=B", "A\0"]:
        with pytest.raises(ValueError, match="not a variable name"):
            child_allow_list([bad])


def test_scrubbing_keeps_what_matches_and_star_keeps_everything() -> None:
    # scrub_environment acts on the whole process: run it in a fresh interpreter
    code = (
        "import os, sys\n"
        "from adapters.child_env import scrub_environment\n"
        "removed = scrub_environment(sys.argv[1].split(','))\n"
        "print(sorted(os.environ), 'GONE_1' in open('/proc/self/environ').read())\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"}
    env |= {"GONE_1": "x", "KEEP_1": "y"}

    def run(allow: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, allow], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert run("PATH,PYTHON*,KEEP_?") == "['KEEP_1', 'PATH', 'PYTHONPATH'] False"
    assert run("*") == "['GONE_1', 'KEEP_1', 'LC_ALL', 'PATH', 'PYTHONPATH'] True"
