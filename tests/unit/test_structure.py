"""The shape of the code, as docs/architecture.md states it.

The layers are import-linter contracts (`[tool.importlinter]` in pyproject.toml, run
by `lint-imports` in the test command); what a contract cannot say is checked here, by
reading the code (ast, and grimp's import graph for cycles), not running it.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

from fsm.cli import layout

#: asks xdist (--dist loadgroup) for one worker for this module, so the files are parsed once
pytestmark = pytest.mark.xdist_group("structure")

ROOT = Path(__file__).resolve().parents[2]
#: where the code lives (tests and benchmarks are held to the underscore rule too)
CODE = ("fsm", "adapters")
EVERYTHING = (*CODE, "benchmarks", "tests", "examples")
#: private names of the standard library's own public API (namedtuple, os)
STDLIB_PRIVATE = frozenset({"_replace", "_asdict", "_fields", "_make", "_exit"})
#: limits of docs/architecture.md
MAX_TOP_LEVEL_MODULES = 12
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def _files(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The module at `path`, parsed once per module of tests (a dozen tests read the same
    few hundred files, which do not change while they do; nothing here edits a tree)."""
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at `path` (`ast.walk` order), walked once as its tree."""
    return tuple(ast.walk(_tree(path)))


@pytest.fixture(scope="module", autouse=True)
def _parsed_once_per_module() -> Iterator[None]:
    """The parsed trees live as long as this module's tests run, then are let go."""
    yield
    _tree.cache_clear()
    _nodes.cache_clear()


def _defined(nodes: tuple[ast.AST, ...]) -> set[str]:
    """Every name a module defines or binds (functions, classes, attributes it sets,
    arguments, keywords): reading one of these is reading its own."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            names.add(node.arg)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in STDLIB_PRIVATE


#: the functions that reach an attribute by a name given as a string
BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})
#: replacers by name (pytest's monkeypatch, unittest.mock), as `x.setattr(obj, "_name")`
#: or `x.setattr("module._name")`
PATCHERS = frozenset({"setattr", "delattr", "object", "patch"})


def _named_private(node: ast.Call) -> str | None:
    """The underscore name `node` reaches by string (`getattr(x, "_y")`,
    `monkeypatch.setattr(X, "_y", ...)`, `monkeypatch.setattr("m._y", ...)`), else None."""
    func = node.func
    if isinstance(func, ast.Name) and func.id in BY_NAME:
        args = node.args[1:2]
    elif isinstance(func, ast.Attribute) and func.attr in PATCHERS:
        args = node.args[:2]
    else:
        return None
    first = node.args[0] if node.args else None
    if isinstance(first, ast.Name) and first.id in ("self", "cls"):
        return None
    for arg in args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            name = arg.value.rsplit(".", 1)[-1]
            if _private(name):
                return name
    return None


def reach_ins(path: Path) -> list[str]:
    """Where the module at `path` reads another module's underscore names: an import of
    one, `x._name` where x is not self or cls and the module defines no `_name`, or such
    a name given as a string to getattr/setattr (or monkeypatch.setattr and its kin)."""
    own = _defined(_nodes(path))
    found = []
    for node in _nodes(path):
        if isinstance(node, ast.Call):
            # by string, even a name the module defines itself names another's private:
            # the object is not self (a module's own `_conn` is not `store._conn`)
            name = _named_private(node)
            if name is not None:
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} names {name}: {ast.unparse(node)[:60]}"
                )
        elif isinstance(node, ast.ImportFrom):
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{a.name}"
                for a in node.names
                if _private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if not _private(node.attr) or node.attr in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(
                f"{path.relative_to(ROOT)}:{node.lineno} reads "
                f"{ast.unparse(node.value)[:40]}.{node.attr}"
            )
    return found


#: underscore names reached by string that no public seam can replace, each with why:
#: (file, name). Kept minimal: an entry nothing reaches any more fails the test below.
#: (tests/property/mutants.py is not here: its deliberate mutants subclass MemoryStore
#: and read its state through `self`, which a subclass may.)
REACH_IN_ALLOWED: dict[tuple[str, str], str] = {
    # pika's own private: a channel the broker closed keeps its reason nowhere public
    ("adapters/rabbitmq/consumer.py", "_closing_reason"): "pika exposes no public reason",
    # fault injection into the RabbitMQ consumer's I/O thread: a bug in its failure
    # handling, a loop that returns unasked, acks and settles out of order; the thread's
    # steps are not a seam an application should have
    ("tests/integration/rabbitmq/test_rabbitmq_recovery.py", "_log_failure"): "injects a bug",
    # the pauses model's own mutants, injected in-process so that a test shows the
    # model failing on them: the pausing engine's cache after its own pause or resume
    ("tests/property/test_faults_pauses.py", "_changed"): "injects the own mutants' bugs",
    ("tests/integration/rabbitmq/test_rabbitmq_recovery.py", "_loop"): "a loop that returns",
    ("tests/integration/rabbitmq/test_rabbitmq_faults.py", "_ack"): "acks out of order",
    ("tests/integration/rabbitmq/test_rabbitmq_faults.py", "_acked"): "settles eagerly",
}


def _allowed(hit: str) -> tuple[str, str] | None:
    rel = hit.split(":", 1)[0]
    for key in REACH_IN_ALLOWED:
        if key[0] == rel and f" names {key[1]}:" in hit:
            return key
    return None


def test_no_module_reads_another_modules_underscore_names() -> None:
    hits = [hit for path in _files(*EVERYTHING) for hit in reach_ins(path)]
    found = [hit for hit in hits if _allowed(hit) is None]
    assert not found, "reach-ins:\n" + "\n".join(found)
    unused = set(REACH_IN_ALLOWED) - {_allowed(hit) for hit in hits}
    assert not unused, f"allowed reach-ins nothing makes any more: {sorted(unused)}"


def test_the_reach_in_finder_finds_a_reach_in(tmp_path: Path) -> None:
    # given a module that imports a private name and reads another object's private one
    module = tmp_path / "m.py"
    module.write_text(
        "from x import _hidden\n"
        "def f(engine):\n    return engine._observe\n"
        "class C:\n    def g(self):\n        return self._mine\n"
    )
    # then both are found, and a read of its own self is not
    found = reach_ins_at(module)
    assert [h.split(" ", 1)[1] for h in found] == ["imports x._hidden", "reads engine._observe"]


def test_the_reach_in_finder_finds_underscore_names_given_as_strings(tmp_path: Path) -> None:
    # given a module that reaches private names by string, and its own by string too
    module = tmp_path / "m.py"
    module.write_text(
        "def f(store, monkeypatch):\n"
        "    getattr(store, '_conn')\n"
        "    setattr(store, '_conn', None)\n"
        "    monkeypatch.setattr(Store, '_conn', None)\n"
        "    monkeypatch.setattr('adapters.sqlite._conn', None)\n"
        "    getattr(store, 'public')\n"
        "class C:\n"
        "    def g(self, other):\n        self._conn = getattr(self, '_theirs', None)\n"
        "        return getattr(other, '_conn')\n"
    )
    # then each reach into another's private is found, even one named like an attribute
    # of its own; reaches into self and public names are not
    found = [h.split(" ", 1)[1].split(":")[0] for h in reach_ins_at(module)]
    assert found == ["names _conn"] * 5


def reach_ins_at(path: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, path.parent
    try:
        return reach_ins(path)
    finally:
        ROOT = saved


# --- no import cycle, packages included -------------------------------------------------


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module of `graph` (Tarjan's,
    iterative): each is an import cycle. A package's `__init__` is a module like any
    other, so `fsm.cli` importing `fsm.cli.spec_cmd` and back is one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def imported_by(module: str) -> Iterator[str]:
        return iter(sorted(graph.find_modules_directly_imported_by(module)))

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)

    for root in sorted(graph.modules):
        if root in index:
            continue
        visit(root)
        walk = [(root, imported_by(root))]
        while walk:
            module, onward = walk[-1]
            for other in onward:
                if other not in index:
                    visit(other)
                    walk.append((other, imported_by(other)))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                walk.pop()
                if walk:
                    low[walk[-1][0]] = min(low[walk[-1][0]], low[module])
                if low[module] == index[module]:
                    component: list[str] = []
                    while not component or component[-1] != module:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_no_import_cycle_between_any_modules_packages_included() -> None:
    # import-linter's acyclic_siblings contract compares the siblings of a package, so
    # a cycle between a package's __init__ and one of its own modules passes it; every
    # import is counted here, function-level and `if TYPE_CHECKING:` ones included
    graph = grimp.build_graph(*CODE, cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


#: the rooms of fsm/ an adapter may import besides the vocabulary: the core, the ports,
#: the service, and running a handler (executors run handlers); never the worker, whose
#: roles drive the adapters, nor a surface
ADAPTERS_MAY_IMPORT = frozenset({"lifecycle", "ports", "service", "handling"})


def test_adapters_import_only_the_vocabulary_core_ports_service_and_handling() -> None:
    # the vocabulary: the modules the layer contract lists below the core
    all_layers = layout.layers(ROOT)
    core = next(i for i, layer in enumerate(all_layers) if "lifecycle" in layer)
    allowed = ADAPTERS_MAY_IMPORT | {n for layer in all_layers[core + 1 :] for n in layer}
    graph = grimp.build_graph(*CODE, cache_dir=None)
    found = sorted(
        f"{module} imports {imported}"
        for module in graph.modules
        if module.startswith("adapters")
        for imported in graph.find_modules_directly_imported_by(module)
        # `fsm` itself (its __init__ loads every room) counts as no allowed room
        if imported.startswith("fsm") and f"{imported}.".split(".")[1] not in allowed
    )
    assert not found, "adapters reaching above their rooms:\n" + "\n".join(found)


def test_the_cycle_finder_finds_a_package_importing_its_own_module_and_back() -> None:
    # given a package whose __init__ imports its module, which imports the package back
    graph = grimp.ImportGraph()
    for module in ("p", "p.cmd", "p.util", "q"):
        graph.add_module(module)
    graph.add_import(importer="p", imported="p.cmd")
    graph.add_import(importer="p.cmd", imported="p")
    graph.add_import(importer="p.cmd", imported="p.util")
    graph.add_import(importer="q", imported="p")
    # then that pair is the one cycle, and the modules merely below it are in none
    assert import_cycles(graph) == [["p", "p.cmd"]]


# --- one write path ----------------------------------------------------------------

#: the modules that may write decisions through a store: the kernel's write path, and
#: the async driver (which writes through the asyncio twin and tells the observers)
WRITERS = {"fsm/service/kernel.py", "fsm/service/drivers.py"}
WRITES = frozenset({"apply", "claim", "insert", "insert_in", "erase", "record"})


def test_only_the_kernel_writes_decisions_so_every_transition_is_observed() -> None:
    found = []
    for path in _files("fsm"):
        rel = str(path.relative_to(ROOT))
        if rel in WRITERS or rel.startswith("fsm/testing/"):
            continue
        for node in _nodes(path):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in WRITES
                and ast.unparse(node.func.value).split(".")[-1] in ("store", "astore")
            ):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}")
    assert not found, "writes around the kernel (unobserved transitions):\n" + "\n".join(found)


# --- one computation of an event's states, one JSON encoder ---------------------------


def test_event_sources_and_destinations_are_computed_only_by_the_lifecycle() -> None:
    found = []
    for path in _files(*CODE):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("fsm/lifecycle/"):
            continue
        for node in _nodes(path):
            if isinstance(node, ast.Compare) and _tests_membership_in_the_table(node):
                # `(state, event) in spec.table`: whether `event` leaves from `state`
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
                continue
            if not isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
                continue
            for gen in node.generators:
                source = ast.unparse(gen.iter)
                over_table = source.endswith((".table", ".table.items()"))
                if over_table and any(isinstance(test, ast.Compare) for test in gen.ifs):
                    found.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
    assert not found, "use Lifecycle.sources / dests:\n" + "\n".join(found)


def _tests_membership_in_the_table(node: ast.Compare) -> bool:
    return any(
        isinstance(op, ast.In | ast.NotIn) and ast.unparse(right).endswith(".table")
        for op, right in zip(node.ops, node.comparators, strict=True)
    )


def _encodes_canonically(node: ast.AST) -> bool:
    """`json.dumps(..., sort_keys=True, separators=...)`: compact sorted JSON, the
    canonical form (indented or unsorted text, made for people, is not)."""
    if not isinstance(node, ast.Call) or ast.unparse(node.func) not in ("json.dumps", "json.dump"):
        return False
    given = {k.arg: k.value for k in node.keywords}
    sorted_keys = given.get("sort_keys")
    return (
        isinstance(sorted_keys, ast.Constant)
        and sorted_keys.value is True
        and "separators" in given
        and "indent" not in given
    )


def test_one_canonical_json_encoder() -> None:
    found = []
    for path in _files(*CODE):
        rel = str(path.relative_to(ROOT))
        if rel == "fsm/jsonio.py":
            continue
        text = path.read_text()
        if "c_make_encoder" in text or "JSONEncoder(" in text:
            found.append(rel)
        found += [
            f"{rel}:{n.lineno}"
            for n in _nodes(path)
            if isinstance(n, ast.Call) and _encodes_canonically(n)
        ]
    assert not found, f"canonical JSON made outside fsm.jsonio.canonical: {found}"


# --- sizes ---------------------------------------------------------------------------


def test_fsm_top_level_holds_few_modules_beside_its_rooms() -> None:
    modules = sorted(p.name for p in (ROOT / "fsm").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


@pytest.mark.parametrize("limit", [MAX_MODULE_LINES])
def test_no_module_is_over_the_line_limit_outside_the_test_kit(limit: int) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _files(*CODE)
        if not str(p.relative_to(ROOT)).startswith("fsm/testing/")
        and (n := len(p.read_text().splitlines())) > limit
    }
    assert not long, long


def test_no_class_is_over_the_line_limit_outside_the_test_kit() -> None:
    long = {}
    for path in _files(*CODE):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("fsm/testing/"):
            continue
        for node in _nodes(path):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    long[f"{rel}:{node.name}"] = size
    assert not long, long


def test_every_subpackage_is_reachable_as_an_attribute_of_its_package() -> None:
    # `fsm.lifecycle` once named a function re-exported by fsm/__init__.py, so
    # `import fsm.lifecycle.spec as s` failed: no public name may shadow a subpackage
    for path in _files(*CODE):
        if path.name != "__init__.py":
            continue
        name = ".".join(path.relative_to(ROOT).parent.parts)
        parent, _, child = name.rpartition(".")
        if not parent:
            continue
        module = importlib.import_module(name)
        assert getattr(importlib.import_module(parent), child) is module, (
            f"{parent}.{child} is not the module {name}"
        )


# --- docs/architecture.md names only what exists ----------------------------------------


def _resolves(dotted: str) -> bool:
    """Whether `fsm.a.b.C.meth` names a module, or an attribute chain of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_module_path_and_dotted_name_in_the_architecture_page_exists() -> None:
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"`((?:fsm|adapters|specs|tests)/[\w/.]*)`", text))
    dotted = set(re.findall(r"`(fsm(?:\.\w+)+)", text))
    missing = [p for p in sorted(paths) if not (ROOT / p.rstrip("/")).exists()]
    missing += [d for d in sorted(dotted) if not _resolves(d)]
    assert not missing, missing


# --- docs/architecture.md: who calls each guarantee's home ------------------------------
# The "who calls it" column of the page's "One home per guarantee" table, checked.


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an `ImportFrom` in the module at `path` imports from."""
    if not node.level:
        return node.module or ""
    package = _dotted(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def callers(module: str, name: str, roots: tuple[str, ...] = (*CODE, "benchmarks")) -> set[str]:
    """The files that call function `name` of `module`: imported by name (`from module
    import name as n; n()`) or through its module (`from pkg import mod as m; m.name()`)."""
    found = set()
    for path in _files(*roots):
        by_name, by_module = set(), set()
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom):
                base = _imported_from(path, node)
                for alias in node.names:
                    if base == module and alias.name == name:
                        by_name.add(alias.asname or alias.name)
                    if f"{base}.{alias.name}" == module:
                        by_module.add(alias.asname or alias.name)
        for node in _nodes(path):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Name) and func.id in by_name) or (
                isinstance(func, ast.Attribute)
                and func.attr == name
                and isinstance(func.value, ast.Name)
                and func.value.id in by_module
            ):
                found.add(str(path.relative_to(ROOT)))
    return found


def importers(module: str, roots: tuple[str, ...] = (*CODE, "benchmarks")) -> set[str]:
    """The files that import `module` (or a name from it), its own package's aside."""
    found = set()
    for path in _files(*roots):
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom):
                base = _imported_from(path, node)
                if base == module or any(f"{base}.{a.name}" == module for a in node.names):
                    found.add(str(path.relative_to(ROOT)))
            elif isinstance(node, ast.Import) and any(a.name == module for a in node.names):
                found.add(str(path.relative_to(ROOT)))
    return found


def method_callers(name: str) -> set[str]:
    """The files of fsm/ and adapters/ that call a method `name` (`x.name(...)`)."""
    return {
        str(path.relative_to(ROOT))
        for path in _files(*CODE)
        for node in _nodes(path)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    }


def _room(path: str) -> str:
    """`fsm/<room>` (a package or a top-level module, by name), `adapters`, `benchmarks`."""
    parts = path.split("/")
    return parts[1].removesuffix(".py") if parts[0] == "fsm" else parts[0]


def _rooms(paths: set[str]) -> set[str]:
    return {_room(p) for p in paths}


def test_only_the_rescuer_judges_whether_an_owner_is_dead() -> None:
    assert method_callers("judge") == {"fsm/service/maintenance/rescue.py"}


def test_event_sources_and_destinations_are_asked_by_the_rooms_the_page_names() -> None:
    asking = _rooms(method_callers("sources") | method_callers("dests")) - {"lifecycle"}
    assert asking == {"service", "worker", "cli", "dashboard", "testing"}


def test_new_jobs_are_made_by_the_kernel_and_a_schedules_check_only() -> None:
    assert callers("fsm.inputs", "new_job") == {
        "fsm/service/kernel.py",
        "fsm/service/schedules.py",
    }


def test_recovery_is_run_by_the_sweeper_jobfsm_recover_and_the_fault_suite() -> None:
    running = {
        path
        for name in ("sweep", "recovery_services")
        for path in callers("fsm.service.maintenance", name)
        if not path.startswith("fsm/service/maintenance/")
    }
    outside_the_suite = {p for p in running if not p.startswith("fsm/testing/")}
    assert outside_the_suite == {"fsm/worker/sweeper.py", "fsm/cli/recover_cmd.py"}
    assert running - outside_the_suite, "the fault suite runs no recovery"


def test_the_invariant_checks_are_run_by_the_fault_suite_the_demo_and_chaos() -> None:
    checking = importers("fsm.lifecycle.invariants")
    outside_the_suite = {p for p in checking if not p.startswith("fsm/testing/")}
    assert outside_the_suite == {"fsm/demo/run.py", "benchmarks/chaos.py"}
    assert checking - outside_the_suite, "the fault suite checks no invariant"


def test_error_text_is_cleaned_by_the_rooms_the_page_names() -> None:
    cleaning = _rooms(callers("fsm.text", "clean_text"))
    assert cleaning == {"lifecycle", "handling", "service", "worker", "telemetry"}


def test_url_secrets_are_hidden_by_the_rooms_the_page_names() -> None:
    assert _rooms(importers("fsm.secrets")) == {"adapters", "cli", "contrib", "demo", "telemetry"}


def test_every_start_rule_enforces_the_kinds_policy() -> None:
    from fsm.lifecycle.spec import lifecycle

    starts = [r for rules in lifecycle().table.values() for r in rules if r.event == "start"]
    assert starts
    assert all("enforce_kind_policy" in r.effects for r in starts)
