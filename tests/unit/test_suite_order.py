"""The suite's own scheduling table (LONG_FIRST in tests/conftest.py): it names real
tests, and a test it names is collected before the others (xdist hands tests out in
collection order, so a long test collected last would end the run alone)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from tests.conftest import LONG_FIRST

TESTS = Path(__file__).resolve().parents[1]
EXHAUSTIVE = TESTS / "property" / "test_exhaustive.py"
LONG = "test_the_ci_scope_is_explored_within_its_budget"


def _test_functions(path: Path) -> list[str]:
    """The test functions of the module at `path`, in the order they are defined."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    ]


def _test_names(stem: str) -> set[str]:
    """The test functions and test methods (inherited ones too) of the module `stem`."""
    (path,) = [p for p in TESTS.rglob(f"{stem}.py") if "__pycache__" not in p.parts]
    dotted = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
    module = importlib.import_module(dotted)
    names = set(vars(module))
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == dotted:
            names.update(dir(value))
    return {name for name in names if name.startswith("test_")}


def test_every_long_test_named_first_exists() -> None:
    # a renamed or removed test would leave an entry that orders nothing: none does
    missing = [(stem, name) for stem, name in LONG_FIRST if name not in _test_names(stem)]
    assert missing == []


def test_a_long_test_is_collected_before_the_tests_defined_above_it() -> None:
    # given a module whose long test (in LONG_FIRST) is defined last
    assert ("test_exhaustive", LONG) in LONG_FIRST
    assert _test_functions(EXHAUSTIVE)[-1] == LONG
    # when the module is collected
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "--collect-only", "-q", str(EXHAUSTIVE)],
        capture_output=True,
        text=True,
        check=True,
        cwd=TESTS.parent,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    # then it comes first
    assert len(ids) > 1
    assert ids[0].endswith(f"::{LONG}")
