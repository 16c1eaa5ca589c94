"""Run the `jobfsm` CLI as a subprocess (`python -m fsm.cli`), as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: longest any single CLI call may take in these tests (the demo gets its own bound)
CALL_TIMEOUT = 60.0


def run_module(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = CALL_TIMEOUT,
    python: str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` in a child, without this run's JOBFSM_STORE."""
    full_env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    full_env.update(env or {})
    return subprocess.run(
        [python, "-m", module, *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def run_cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run_module("fsm.cli", *args, **kw)


def ok(*args: str, **kw: Any) -> str:
    """Run and return stdout; fail with the command's stderr when it exits non-zero."""
    done = run_cli(*args, **kw)
    assert done.returncode == 0, f"jobfsm {' '.join(args)} -> {done.returncode}: {done.stderr}"
    return done.stdout


def ok_json(*args: str, **kw: Any) -> Any:
    return json.loads(ok(*args, "--json", **kw))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The error of a failed call: exactly one line on stderr, no traceback."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def wait_for_state(store: str, job_id: str, states: set[str], timeout: float = 60.0) -> str:
    """Poll the store (in this process: quicker than a CLI call) until the job is in `states`."""
    from fsm import Engine
    from fsm.registry import open_store

    opened = open_store(store)
    try:
        engine = Engine(opened)
        until = time.monotonic() + timeout
        while True:
            state = engine.get(job_id).state
            if state in states:
                return state
            assert time.monotonic() < until, f"job {job_id} still {state} after {timeout}s"
            time.sleep(0.02)
    finally:
        opened.close()
