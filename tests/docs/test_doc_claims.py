"""Statements of the docs that the code decides: install commands, the extras, the
dashboard's actions, one import of each public name."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from fsm import Engine, open_store
from fsm.dashboard.views import operator_actions

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_no_page_installs_jobfsm_from_the_package_index() -> None:
    """jobfsm is not published: `pip install 'jobfsm[...]'` installs nothing or another package."""
    pattern = re.compile(r"pip install ['\"]?jobfsm\[")
    found = [
        f"{page.name}:{n}: {line.strip()}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]

    assert not found, "\n".join(found)


def test_getting_started_lists_every_extra_and_counts_them() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    [everything] = extras["all"]  # "jobfsm[postgres,rabbitmq,...]"
    bundled = everything.split("[", 1)[1].rstrip("]").split(",")
    guide = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}

    for name in bundled:
        assert f"pip install -e '.[{name}]'" in guide, name
    assert f"# all {words[len(bundled)]}" in guide


def test_the_dashboard_page_offers_on_parked_jobs_what_the_lifecycle_allows() -> None:
    engine = Engine(open_store("memory://"))
    allowed = operator_actions(engine, "investigate")
    text = (ROOT / "docs" / "dashboard.md").read_text(encoding="utf-8")
    inbox = text.split("**Investigate.**", 1)[1].split("\n\n", 2)[1]
    offered = set(re.findall(r"\*(resolve|requeue|cancel)\b", inbox))

    assert offered == set(allowed), inbox


def test_handlers_is_imported_one_way_across_the_docs() -> None:
    imports = set()
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            if re.match(r"\s*from \S+ import .*\bHandlers\b", line):
                imports.add(line.split(" import ")[0].strip())

    assert imports == {"from fsm"}


def test_every_test_a_page_names_exists() -> None:
    """`tests/...py::name` on a page names a function of that file."""
    named = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")
    missing = []
    for page in PAGES:
        for path, name in named.findall(page.read_text(encoding="utf-8")):
            source = ROOT / path
            if not source.exists() or f"def {name}(" not in source.read_text(encoding="utf-8"):
                missing.append(f"{page.name}: {path}::{name}")

    assert not missing, "\n".join(missing)


def test_the_security_checks_name_tests_for_each_of_the_17_findings() -> None:
    text = (ROOT / "docs" / "dashboard-security-checks.md").read_text(encoding="utf-8")
    findings = re.split(r"^\*\*(\d+)\. ", text, flags=re.M)[1:]
    numbers = [int(n) for n in findings[::2]]
    bodies = findings[1::2]

    assert numbers == list(range(1, 18))
    for n, body in zip(numbers, bodies, strict=True):
        assert re.search(r"^- `tests/\S+\.py::test_\w+`", body, re.M), f"finding {n} names no test"
