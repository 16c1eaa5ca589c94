"""`import fsm` is cheap, and every public name still resolves (fsm/__init__.py).

The top-level names load on first use, so a `jobfsm` command, a worker process or a
user's `from fsm import Permanent` pays only for the modules it touches.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fsm

#: what `import fsm` alone must not load: the engine, the worker, asyncio's engine, the
#: telemetry, the lifecycle machine, and no driver or web framework
HEAVY = (
    "fsm.service.engine",
    "fsm.service.aio",
    "fsm.worker",
    "fsm.telemetry",
    "fsm.lifecycle",
    "asyncio",
    "transitions",
    "psycopg",
    "pika",
    "starlette",
    "hypothesis",
)


def _loaded_after(code: str) -> list[str]:
    """The modules of HEAVY that a fresh interpreter holds after running `code`."""
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = json.loads(done.stdout)
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_importing_fsm_loads_none_of_the_heavy_modules() -> None:
    # given a fresh interpreter; when it imports fsm; then nothing heavy came with it
    assert _loaded_after("import fsm") == []


def test_a_name_loads_its_module_on_first_use() -> None:
    # given a fresh interpreter; when it takes one exception class from fsm
    loaded = _loaded_after("from fsm import Permanent")
    # then the engine and the worker stay out still
    assert loaded == []
    # and a name of the engine brings the engine
    assert "fsm.service.engine" in _loaded_after("from fsm import Engine")


def _typed_names() -> dict[str, str]:
    """What type checkers read in fsm/__init__.py (the imports under `TYPE_CHECKING`):
    each public name and the module, relative to fsm, that defines it."""
    tree = ast.parse(Path(fsm.__file__).read_text(encoding="utf-8"))
    (guard,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.name: "." * node.level + (node.module or "")
        for node in guard.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_name_of_all_resolves_to_the_object_type_checkers_see() -> None:
    # given the names type checkers see and the public surface
    typed = _typed_names()
    # then they are the same names, each once
    assert sorted(fsm.__all__) == sorted(typed)
    assert len(set(fsm.__all__)) == len(fsm.__all__)
    # and each resolves at run time to the very object of the module they read it from
    for name in fsm.__all__:
        module = importlib.import_module(typed[name], "fsm")
        assert getattr(fsm, name) is getattr(module, name), name


def test_dir_lists_every_public_name_and_an_unknown_name_is_an_attribute_error() -> None:
    assert set(fsm.__all__) <= set(dir(fsm))
    with pytest.raises(AttributeError, match="NoSuchName"):
        fsm.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
