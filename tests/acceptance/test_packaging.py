"""The wheel works on its own: built, installed into a fresh venv, run outside the repository.

The venv sees the system site-packages (for the runtime dependencies, so the test
runs offline) but the wheel is installed into the venv itself, and the test checks
that `fsm` is imported from there, not from this checkout.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: bound on each step (build, venv, install, each command)
STEP_TIMEOUT = 180

# builds a wheel and installs it in a fresh venv once (module fixture): one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


def _run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{cmd} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(venv bin dir, a working directory outside the repository)."""
    base = tmp_path_factory.mktemp("packaging")
    dist = base / "dist"
    # Build offline with the backend this environment has; without it (a venv made by
    # `pip install -e`, which builds in isolation) let `build` fetch it the same way.
    offline = importlib.util.find_spec("hatchling") is not None
    isolation = ["--no-isolation"] if offline else []
    _run(sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", dist, cwd=ROOT)
    (wheel,) = dist.glob("jobfsm-*.whl")
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=base)
    bin_dir = venv / "bin"
    # --system-site-packages reaches the base interpreter's packages only; when this test
    # runs inside a virtualenv, its runtime dependencies live there: add those directories
    # after the venv's own (a path listed in a .pth file runs none of its own .pth files,
    # so this checkout's editable install stays out).
    site_dir = _run(
        bin_dir / "python",
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        cwd=base,
    ).strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site_dir, "_jobfsm_test_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    _run(
        bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel, cwd=base
    )
    outside = base / "elsewhere"
    outside.mkdir()
    return bin_dir, outside


def test_wheel_ships_the_spec_and_the_demo(tmp_path: Path, installed: tuple[Path, Path]) -> None:
    bin_dir, outside = installed

    where = _run(
        bin_dir / "python",
        "-c",
        "import fsm, fsm.lifecycle.spec as s; print(fsm.__file__); print(s.default_spec_path())",
        cwd=outside,
    ).splitlines()

    assert str(bin_dir.parent) in where[0], "fsm must come from the installed wheel"
    assert where[1].endswith("fsm/specs/job.toml")
    assert str(bin_dir.parent) in where[1]


def test_installed_cli_checks_the_spec_and_draws_the_diagram(
    installed: tuple[Path, Path],
) -> None:
    bin_dir, outside = installed

    checked = _run(bin_dir / "jobfsm", "spec", "check", cwd=outside)
    drawn = _run(bin_dir / "jobfsm", "diagram", cwd=outside)

    assert checked.startswith("ok: ")
    assert drawn.startswith("stateDiagram-v2")


def test_installed_demo_runs_from_outside_the_repository(installed: tuple[Path, Path]) -> None:
    bin_dir, outside = installed

    out = _run(
        bin_dir / "jobfsm",
        "demo",
        "--jobs",
        "50",
        "--seed",
        "5",
        "--dir",
        outside / "demo",
        cwd=outside,
    )

    summary = json.loads((outside / "demo" / "summary.json").read_text(encoding="utf-8"))
    assert summary["ok"] is True
    assert summary["lost"] == 0
    assert "OK" in out.splitlines()[-1]


def test_wheel_contains_no_tests_or_docs(installed: tuple[Path, Path]) -> None:
    bin_dir, _ = installed
    (wheel,) = (bin_dir.parent.parent / "dist").glob("*.whl")

    names = zipfile.ZipFile(wheel).namelist()

    assert "fsm/specs/job.toml" in names
    assert "fsm/demo/app.py" in names
    assert not [n for n in names if n.startswith(("tests/", "docs/"))]
