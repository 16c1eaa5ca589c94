"""No import cycles in fsm/ or adapters/: every module can be read on its own.

Every import counts, at module level or inside a function (a lazy import only
hides a cycle), except those under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fsm", "adapters")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()

    def target(module: str) -> str | None:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        return module or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (t := target(alias.name)) is not None:
                    out.add(t)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                t = full if full in modules else target(base)
                if t is not None:
                    out.add(t)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    # A package's __init__ re-exports its modules; importing a module through its
    # package is not a cycle of the module's own, so __init__ files are left out.
    return {
        name: {m for m in _imports(name, path, modules) if modules[m].name != "__init__.py"}
        for name, path in modules.items()
        if path.name != "__init__.py"
    }


def test_no_import_cycles_in_fsm_or_adapters() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    # given a graph with one cycle through three modules and one module outside it
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    # then exactly that cycle is reported
    assert _cycles(graph) == [["a", "b", "c"]]


def test_every_subpackage_is_reachable_as_an_attribute_of_its_package() -> None:
    # `fsm.lifecycle` once named a function re-exported by fsm/__init__.py, so
    # `import fsm.lifecycle.spec as s` failed: no public name may shadow a subpackage
    import importlib

    for name, path in _modules().items():
        if path.name != "__init__.py":
            continue
        parent, _, child = name.rpartition(".")
        if not parent:
            continue
        importlib.import_module(name)
        assert getattr(importlib.import_module(parent), child) is importlib.import_module(name), (
            f"{parent}.{child} is not the module {name}"
        )
