"""The web stack's floors are past its public advisories, and CI installs one pinned set.

The advisories (the version each was fixed in) are written here so that lowering a floor
below a fix, or a constraints file pinning a vulnerable release, fails the suite.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
#: package -> (advisory, first fixed version)
ADVISORIES = {
    "starlette": [
        ("GHSA-f96h-pmfr-66vw", "0.40.0"),
        ("GHSA-2c2j-9gv5-cj73", "0.47.2"),
        ("GHSA-7f5h-v6xp-fcq8", "0.49.1"),
        ("GHSA-86qp-5c8j-p5mr", "1.0.1"),
        ("GHSA-jp82-jpqv-5vv3", "1.3.0"),
        ("GHSA-82w8-qh3p-5jfq", "1.3.1"),
    ],
    "python-multipart": [
        ("GHSA-59g5-xgcq-4qw3", "0.0.18"),
        ("GHSA-mj87-hwqh-73pj", "0.0.26"),
        ("GHSA-pp6c-gr5w-3c5g", "0.0.27"),
        ("GHSA-6jv3-5f52-599m", "0.0.30"),
    ],
}


def _web_floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    floors = {}
    for spec in project["optional-dependencies"]["web"]:
        req = Requirement(spec)
        (low,) = [s.version for s in req.specifier if s.operator == ">="]
        floors[req.name] = Version(low)
    return floors


def _constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = Version(version.strip())
    return pins


def test_the_web_floors_are_past_every_advisory() -> None:
    floors = _web_floors()
    for package, advisories in ADVISORIES.items():
        for advisory, fixed in advisories:
            assert floors[package] >= Version(fixed), f"{package} floor admits {advisory}"


def test_the_constraints_pin_every_dev_package_within_its_bounds() -> None:
    pins = _constraints()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for spec in [*project["dependencies"], *(s for e in extras.values() for s in e)]:
        req = Requirement(spec)
        if req.name == "jobfsm":
            continue
        assert req.name.lower() in pins, f"{req.name} is not in constraints.txt"
        assert req.specifier.contains(pins[req.name.lower()]), f"{req.name} pin out of bounds"
    for package, advisories in ADVISORIES.items():
        assert all(pins[package] >= Version(fixed) for _, fixed in advisories)


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (command,) = [
        ln for ln in readme.splitlines() if ln.startswith("python3 -m venv") and "pytest" in ln
    ]
    assert "-c constraints.txt" in command
    assert command in ci.splitlines()
    assert re.search(r"pip install -e '\.\[dev,bench\]' -c constraints\.txt", command)


def _extra_names(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The packages `jobfsm[extra]` installs directly, through its jobfsm[...] references."""
    names = set()
    for spec in extras[extra]:
        req = Requirement(spec)
        if req.name == "jobfsm":
            names |= {n for e in req.extras for n in _extra_names(extras, e)}
        else:
            names.add(req.name.lower())
    return names


def test_the_dev_extra_leaves_the_benchmark_peers_to_bench() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    peers = _extra_names(extras, "bench")

    assert peers == {"procrastinate", "dramatiq", "celery"}
    assert not _extra_names(extras, "dev") & peers
    assert "playwright" in _extra_names(extras, "dev")  # the dashboard's browser tests
