"""Set-up and clean-up hooks (worker_init, worker_exit, child_init) with real processes:
a worker over a SQLite file, process-executor children spawned for real, and the
`jobfsm worker` command as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.executors import ProcessExecutor
from fsm import Engine, LeasePolicy, Policy, open_store
from fsm.service.identity import Identity
from fsm.worker import Worker
from fsm.worker.context import handler_path
from fsm.worker.hooks import HookFailed

from . import hooks_app
from .helpers import REPO, wait_for

APP = "tests.integration.worker.hooks_app:handlers"


def result_of(engine: Engine, job_id: str) -> Any:
    return json.loads(engine.get(job_id).result_json or "null")


def ran(folder: Path, hook: str) -> list[int]:
    """Pids of the processes that ran `hook`, once per run."""
    return sorted(int(p.name.split(".")[1]) for p in folder.glob(f"{hook}.*"))


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    store = open_store(sqlite_url)
    try:
        yield Engine(store, policy=Policy(lease=LeasePolicy(ttl=3, heartbeat_interval=0.3)))
    finally:
        store.close()


def make_worker(engine: Engine, executor: object, **opts: object) -> Worker:
    return Worker(
        engine,
        hooks_app.handlers,
        executor=executor,  # type: ignore[arg-type]
        concurrency=2,
        poll_interval=0.05,
        install_signals=False,
        identity=Identity(),
        **opts,  # type: ignore[arg-type]
    )


class Running:
    """A worker's run() on a thread; what it raised, if anything."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as err:
            self.error = err

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_each_hook_runs_once_per_process_and_every_job_sees_its_childs_init(
    engine: Engine, hooks_dir: Path
) -> None:
    # given: a worker with two child processes (HOOKS_DIR allowed into their environment)
    executor = ProcessExecutor(child_env=("HOOKS_DIR",))
    running = Running(make_worker(engine, executor))
    assert running.worker.wait_started(60)
    children = set(executor.children())
    # when: six jobs run, and one job crashes its child (which is replaced)
    jobs = [engine.submit("hooks.who") for _ in range(6)]
    wait_for(lambda: all(engine.get(j.id).state == "succeeded" for j in jobs), 60, "the jobs")
    crash = engine.submit("hooks.crash")
    wait_for(lambda: engine.get(crash.id).state == "failed", 60, "the crash")
    wait_for(lambda: executor.free == 2, 60, "a replacement child")
    replacement = set(executor.children()) - children
    running.stop()

    # then: worker_init and worker_exit ran once, in the worker process
    assert ran(hooks_dir, "worker_init") == [os.getpid()]
    assert ran(hooks_dir, "worker_exit") == [os.getpid()]
    # child_init ran once in each child, the replacement included, never in the worker
    assert len(replacement) == 1
    assert ran(hooks_dir, "child_init") == sorted(children | replacement)
    # every job ran in a child whose child_init had run before it
    for job in jobs:
        result = result_of(engine, job.id)
        assert result["pid"] in children
        assert result["warm"] == result["pid"]
    assert running.error is None


def test_child_init_runs_once_in_the_worker_process_on_the_thread_executor(
    engine: Engine, hooks_dir: Path
) -> None:
    running = Running(make_worker(engine, "thread"))
    assert running.worker.wait_started(30)
    jobs = [engine.submit("hooks.who") for _ in range(4)]
    wait_for(lambda: all(engine.get(j.id).state == "succeeded" for j in jobs), 30, "the jobs")
    running.stop()

    assert ran(hooks_dir, "child_init") == [os.getpid()]
    assert all(result_of(engine, j.id)["warm"] == os.getpid() for j in jobs)


def test_a_failing_child_init_stops_the_worker_at_start_naming_the_hook(
    engine: Engine, hooks_dir: Path
) -> None:
    # given: child_init raises in every child
    (hooks_dir / "fail-child_init").touch()
    job = engine.submit("hooks.who")
    worker = make_worker(engine, ProcessExecutor(child_env=("HOOKS_DIR",)))

    # when / then: run() raises HookFailed naming the hook, its function and the error
    with pytest.raises(HookFailed) as failed:
        worker.run()
    text = str(failed.value)
    assert f"child_init hook {handler_path(hooks_app.warm_model)} failed" in text
    assert "RuntimeError: child_init cannot open its pool" in text
    # no job was leased; the worker's own clean-up ran (its set-up had)
    assert engine.get(job.id).state == "queued"
    assert ran(hooks_dir, "worker_exit") == [os.getpid()]


def test_a_failing_worker_init_stops_before_any_child_or_lease(
    engine: Engine, hooks_dir: Path
) -> None:
    (hooks_dir / "fail-worker_init").touch()
    job = engine.submit("hooks.who")
    worker = make_worker(engine, ProcessExecutor(child_env=("HOOKS_DIR",)))

    with pytest.raises(HookFailed, match=r"worker_init hook .*open_pool failed: RuntimeError"):
        worker.run()

    assert engine.get(job.id).state == "queued"
    assert ran(hooks_dir, "child_init") == []
    assert ran(hooks_dir, "worker_exit") == []  # clean-up runs only after a set-up


def test_a_failing_worker_exit_is_raised_after_the_worker_stopped(
    engine: Engine, hooks_dir: Path
) -> None:
    (hooks_dir / "fail-worker_exit").touch()
    running = Running(make_worker(engine, "thread"))
    assert running.worker.wait_started(30)
    job = engine.submit("hooks.who")
    wait_for(lambda: engine.get(job.id).state == "succeeded", 30, "the job")
    running.stop()

    assert isinstance(running.error, HookFailed)
    assert "worker_exit hook" in str(running.error)
    assert running.worker.executor is not None


def test_a_replacement_child_whose_init_fails_stops_the_worker_after_a_drain(
    engine: Engine, hooks_dir: Path
) -> None:
    # given: a running worker whose children started fine
    executor = ProcessExecutor(child_env=("HOOKS_DIR",))
    running = Running(make_worker(engine, executor))
    assert running.worker.wait_started(60)
    # when: child_init starts failing, and a job crashes its child
    (hooks_dir / "fail-child_init-after").touch()
    crash = engine.submit("hooks.crash")
    wait_for(lambda: not running.thread.is_alive(), 60, "the worker to stop")

    # then: the worker stopped on its own, naming the hook; the replacement ran it once
    assert isinstance(running.error, HookFailed)
    assert "the model server is away" in str(running.error)
    assert engine.get(crash.id).state == "failed"
    assert len(ran(hooks_dir, "child_init")) == 3  # two at start, one replacement, no loop


def test_the_worker_command_exits_2_with_one_line_when_child_init_fails(
    sqlite_url: str, hooks_dir: Path
) -> None:
    (hooks_dir / "fail-child_init").touch()
    env = dict(os.environ, PYTHONPATH=str(REPO), JOBFSM_CHILD_ENV="HOOKS_DIR")
    cmd = [sys.executable, "-m", "fsm.cli", "worker", "--app", APP, "--store", sqlite_url]
    cmd += ["--executor", "process", "--concurrency", "1"]

    done = subprocess.run(
        cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: child_init hook tests.integration.worker.hooks_app:warm_model failed: "
        "RuntimeError: child_init cannot open its pool; the worker stops"
    ]


def test_a_restarted_executor_whose_children_fail_child_init_reports_it_without_blocking(
    hooks_dir: Path,
) -> None:
    # given: a started process executor whose children ran child_init
    fatal: list[str] = []
    executor = ProcessExecutor(child_env=("HOOKS_DIR",))
    executor.init_children(handler_path(hooks_app.warm_model), fatal.append)
    executor.start(2)
    try:
        assert executor.free == 2
        # when: child_init starts failing and the executor restarts (every lease lost)
        (hooks_dir / "fail-child_init-after").touch()
        executor.restart("test")

        # then: the failure is reported (the worker stops on it), once; no child is free
        wait_for(lambda: len(ran(hooks_dir, "child_init")) == 4, 60, "two more child_init")
        wait_for(lambda: fatal, 60, "the failure to be reported")
        assert fatal == ["RuntimeError: the model server is away"]  # once, not per child
        assert executor.free == 0
    finally:
        executor.shutdown(wait=2.0)
