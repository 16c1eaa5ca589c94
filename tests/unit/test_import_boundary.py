"""fsm/ never imports adapters/ or a driver, not even lazily inside a function."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fsm

FORBIDDEN = ("adapters", "pika", "psycopg", "psycopg_pool", "sqlite3")
FSM_DIR = Path(fsm.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
    return names


def test_no_module_of_fsm_imports_an_adapter_or_a_driver() -> None:
    offenders = []
    for path in sorted(FSM_DIR.rglob("*.py")):
        for name in imported_modules(path):
            if name.split(".")[0] in FORBIDDEN:
                offenders.append(f"{path.relative_to(FSM_DIR.parent)} imports {name}")
    assert offenders == []


def test_importing_fsm_and_its_cli_loads_no_driver() -> None:
    code = (
        "import sys, fsm, fsm.cli, fsm.service.engine, fsm.registry\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
