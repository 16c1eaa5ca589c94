"""Run the `jobfsm` CLI as a subprocess (`python -m fsm.cli`), as a user would, or in
this process (`run_here`, `ok_here`, `ok_json_here`) where a test only reads what a
command prints and stores."""

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


#: the program name click finds for `python -m fsm.cli` (it names it in usage errors)
PROG_NAME = "python -m fsm.cli"


def run_here(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`jobfsm args` in this process, through the console script's own edge
    (`fsm.cli.root.run`: an error becomes one line and an exit status), with click's
    CliRunner isolating stdin, stdout, stderr and the environment (this run's
    JOBFSM_STORE unset, as for `run_cli`). The same command, output and exit status as a
    launch, without its interpreter start and `import fsm` (about 0.27 s of CPU each, a
    few hundred in the suite, #38); the tests of the entry point itself (a real
    process: exit codes, signals, workers) keep `run_cli`."""
    from click.testing import CliRunner

    from fsm.cli import cli
    from fsm.cli.root import run

    code = 0
    before = Path.cwd()
    with CliRunner().isolation(env={"JOBFSM_STORE": None, **(env or {})}) as (out, err, _):
        if cwd is not None:
            os.chdir(cwd)
        try:
            run(cli, list(args), prog_name=PROG_NAME)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else int(done.code is not None)
        finally:
            os.chdir(before)
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess([PROG_NAME, *args], code, stdout, stderr)


def ok_here(*args: str, **kw: Any) -> str:
    """`ok` in this process (`run_here`)."""
    return _stdout(run_here(*args, **kw), args)


def ok_json_here(*args: str, **kw: Any) -> Any:
    return json.loads(ok_here(*args, "--json", **kw))


def ok(*args: str, **kw: Any) -> str:
    """Run and return stdout; fail with the command's stderr when it exits non-zero."""
    return _stdout(run_cli(*args, **kw), args)


def _stdout(done: subprocess.CompletedProcess[str], args: tuple[str, ...]) -> str:
    """What a call of `jobfsm args` printed; fails with its stderr unless it exited 0."""
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
