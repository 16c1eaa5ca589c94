"""The README's first command installs what the demo needs and nothing else.

A fresh virtualenv (no system site-packages) runs the `pip install` of the README's first
set-up command, exactly as written, from the checkout; then no benchmark peer or dev tool
may be installed, and `jobfsm demo` must run there. pip uses its cache and the configured
indexes as a user's would (build isolation included).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ._cli import ROOT

#: bound on each step; the whole test takes well under two minutes with a warm pip cache
STEP_TIMEOUT = 240
#: what the base install must never pull in: benchmark peers (and their brokers' clients)
#: and the development tools
FORBIDDEN = {
    "celery",
    "kombu",
    "billiard",
    "dramatiq",
    "procrastinate",
    "pytest",
    "pytest-timeout",
    "ruff",
    "mypy",
    "build",
    "hypothesis",
}


def readme_install_command() -> list[str]:
    """The `pip install ...` step of the README's first ```sh block, as argv."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.findall(r"```sh\n(.*?)\n```", readme, re.S)[0]
    steps = [s.strip() for s in first.split("&&")]
    (pip,) = [s for s in steps if s.startswith("pip install")]
    return shlex.split(pip)


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{cmd} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_readme_names_a_base_install_without_extras() -> None:
    cmd = readme_install_command()

    assert cmd[:2] == ["pip", "install"]
    assert not any("[" in arg for arg in cmd), f"the demo needs no extra: {cmd}"
    assert "--no-build-isolation" not in cmd


@pytest.mark.slow
@pytest.mark.timeout(3 * STEP_TIMEOUT)
def test_readme_install_in_a_fresh_venv_has_no_peers_or_dev_tools_and_runs_the_demo(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.pop("JOBFSM_STORE", None)
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    bin_dir = venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    pip = readme_install_command()

    _run([str(bin_dir / "python"), "-m", *pip, "-q"], ROOT, env)
    listed = json.loads(_run([str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"],
                             tmp_path, env))  # fmt: skip
    installed = {p["name"].lower().replace("_", "-") for p in listed}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    out = _run(
        [str(bin_dir / "jobfsm"), "demo", "--jobs", "40", "--seed", "3", "--dir", "demo"],
        outside,
        env,
    )

    assert "jobfsm" in installed
    assert not installed & FORBIDDEN, f"the base install pulled in {installed & FORBIDDEN}"
    assert "OK" in out.splitlines()[-1]
    summary = json.loads((outside / "demo" / "summary.json").read_text(encoding="utf-8"))
    assert summary["ok"] is True
