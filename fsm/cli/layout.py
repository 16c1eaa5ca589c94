"""The rooms of the code and the imports between them, drawn for docs/architecture.md.

A room is a package of `fsm/` (`fsm.service`, `fsm.worker`, ...), one of its
top-level modules that the layer contract names (`fsm.registry`), or `adapters`; the
small modules everything builds on (errors, records, JSON, inputs, policies, ...) are
one room, "vocabulary". The layers are read from the import-linter contract
`fsm-layers` in pyproject.toml, the imports from the code itself (every import,
function-level and `if TYPE_CHECKING:` ones included), so the picture cannot drift
from what `lint-imports` checks: `python -m fsm.cli.docgen` redraws it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

#: the room of the modules the layer contract lists below `lifecycle`
VOCABULARY = "vocabulary"
ADAPTERS = "adapters"


def layers(root: Path) -> list[list[str]]:
    """The `fsm-layers` contract's layers, top first, each a list of names."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("id") == "fsm-layers"]
    return [[n.strip() for n in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def _modules(root: Path) -> Iterator[tuple[str, Path]]:
    for package in ("fsm", ADAPTERS):
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _imported(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return out


def room_of(module: str, named: set[str]) -> str | None:
    """The room a module belongs to (None: outside fsm and adapters)."""
    parts = module.split(".")
    if parts[0] == ADAPTERS:
        return ADAPTERS
    if parts[0] != "fsm" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in named else VOCABULARY


def edges(root: Path) -> set[tuple[str, str]]:
    """(importing room, imported room) for every import between two rooms."""
    all_layers = layers(root)
    core = next(i for i, layer in enumerate(all_layers) if "lifecycle" in layer)
    named = {n for layer in all_layers[: core + 1] for n in layer}
    found: set[tuple[str, str]] = set()
    for name, path in _modules(root):
        source = room_of(name, named)
        if source is None or name == "fsm":
            continue  # fsm/__init__.py re-exports the public surface: not a room
        for target in _imported(name, path):
            room = room_of(target, named)
            if room is not None and room != source:
                found.add((source, room))
    return found


def mermaid(root: Path) -> str:
    """The rooms by layer (top first) and the imports between them, as Mermaid."""
    named = layers(root)
    core = next(i for i, layer in enumerate(named) if "lifecycle" in layer)
    shown = [*named[: core + 1], [VOCABULARY]]
    lines = ["flowchart TB"]
    for i, layer in enumerate(shown):
        lines.append(f'    subgraph L{i}["layer {i + 1}"]')
        lines += [f"        {room}" for room in layer]
        lines.append("    end")
    lines.append(f"    {ADAPTERS}[[adapters]]")
    # every room imports the vocabulary: those arrows are left out of the picture
    for source, target in sorted(edges(root)):
        if target != VOCABULARY:
            lines.append(f"    {source} --> {target}")
    return "\n".join(lines) + "\n"
