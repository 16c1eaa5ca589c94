"""The README's Embedding section works as a new user would use it: its handlers block
saved as tasks.py, its submit block run, its `jobfsm worker` line run as shown; the
worker process runs the job (issue 34 item 16)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_examples import EvalExample, find_examples

from fsm import Engine, open_store

ROOT = Path(__file__).resolve().parents[2]
#: how long the worker may take to run the job before the test fails
JOB_BUDGET = 60.0


def embedding_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Embedding\n", 1)[1].split("\n## ", 1)[0]


def test_embedding_shows_the_worker_form_before_the_hand_driven_loop() -> None:
    section = embedding_section()

    assert section.index("jobfsm worker --app") < section.index("engine.claim(")
    assert section.index("@handlers.handler(") < section.index("engine.claim(")
    assert 'Owner(host="example-host"' not in section


def test_the_readme_handlers_run_under_the_readme_worker_command(
    eval_example: EvalExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(embedding_section(), encoding="utf-8")
    handlers, submit, _loop = [ex for ex in find_examples(readme) if ex.prefix == "python"]
    (tmp_path / "tasks.py").write_text(handlers.source, encoding="utf-8")
    [command] = [
        line.removeprefix("$ ")
        for line in embedding_section().splitlines()
        if line.startswith("$ jobfsm worker")
    ]
    monkeypatch.chdir(tmp_path)
    job = eval_example.run(submit)["job"]
    url = "sqlite:///jobs.db"
    assert f"--store {url}" in command

    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "fsm.cli", *shlex.split(command)[1:]],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    engine = Engine(open_store(f"sqlite:///{tmp_path / 'jobs.db'}"))
    try:
        deadline = time.monotonic() + JOB_BUDGET
        while (done := engine.get(job.id)).state != "succeeded":
            assert done.state in ("queued", "leased", "running"), done.state
            assert time.monotonic() < deadline, f"the job is still {done.state}"
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        engine.store.close()

    output = (tmp_path / "worker.log").read_text(errors="replace")
    assert worker.returncode == 0, output
    assert done.result == {"sent": True}
    assert "sending to ada@example.com" in output  # the handler ran in the worker process
