"""Shared fixtures: real SQLite files, a fresh PostgreSQL database, the RabbitMQ broker.

In CI (CI=true) a missing service is a failure; elsewhere the test is skipped and
says why.

Tiers: every test that needs a server is marked `services` (and `postgres` or
`rabbitmq`) at collection, from the fixtures it asks for, its markers and its
parameters (a `[postgres]` case). A test that reaches `pg_url` without the mark fails,
so the tiers cannot drift. `slow` marks what the inner loop leaves out: single tests
say why at the test; whole folders and modules are in `SLOW_PATHS` below.
`pytest -m "not services and not slow"` is the fast tier (README, Contributing); the
full suite runs everything. The suite runs on pytest-xdist workers (pyproject.toml); every test
that touches RabbitMQ without names of its own (`OWN_BROKER_NAMES`) is marked to run on
one worker, one at a time (`xdist_group`): they share the broker's default names. The
others run anywhere; the few marked `broker_settings` (they lower the broker-wide
consumer timeout) run first in the group, alone among all RabbitMQ tests (under
tests/broker_lock.py).
`--dist loadgroup` sends one group to one worker as one unit, which runs it test
after test; `LoadGroupShim` below makes that true under pytest 9.2 (see there), and
tests/unit/test_xdist_groups.py runs a grouped suite on two workers to prove it.
PostgreSQL tests each get their own database and run anywhere.

Benchmark peers: a test that needs procrastinate, dramatiq or celery (the `bench`
extra, not part of `dev`) is marked `peers`; before it runs, `need_peers` fails it in
CI and skips it elsewhere with the command that installs them. `pytest -m "not peers"`
runs everything else after `pip install -e '.[dev]'`.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm.testing.profiles import load_profile

load_profile()

# Bytecode: every process of the suite (this one, the xdist workers, the hundreds of
# `jobfsm` and worker processes the tests start) writes and reuses the compiled modules
# of fsm/, adapters/ and tests/ (in __pycache__, git-ignored), even where the environment
# sets PYTHONDONTWRITEBYTECODE=1 (some container images do): each process otherwise
# compiles them again, which costs more CPU than the test in many of them (a `jobfsm`
# launch 0.40 s instead of 0.25 s). Children inherit os.environ, and xdist starts its
# workers after this module is loaded. A tree copied to be mutated never reads stale
# bytecode: benchmarks/mutation.py copies it without __pycache__ and sets the variable.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

#: `pytester` runs a small suite under this conftest (tests/unit/test_xdist_groups.py)
pytest_plugins = ("pytester",)

IN_CI = bool(os.environ.get("CI"))
PG_ADMIN_URL = os.environ.get("JOBFSM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
RABBIT_URL = os.environ.get("JOBFSM_TEST_RABBIT", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def need_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (.ci/run starts it)")
    pytest.skip(f"{message}; start it to run this test (CI never skips it)")


def need_program(name: str, install: str) -> None:
    """A system program a test needs (.ci/run installs it): a failure in CI, a skip elsewhere."""
    if shutil.which(name) is not None:
        return
    message = f"`{name}` is not installed ({install})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (.ci/run installs it)")
    pytest.skip(f"{message}; install it to run this test (CI never skips it)")


#: the benchmark peers of the `bench` extra, and the install that brings them with dev
PEERS = ("procrastinate", "dramatiq", "celery")
PEERS_INSTALL = "pip install -e '.[dev,bench]' -c constraints.txt"


def need_module(name: str, install: str) -> None:
    """A Python package of an extra outside `dev`: a failure in CI, a skip elsewhere."""
    if importlib.util.find_spec(name) is not None:
        return
    message = f"the `{name}` package is not installed ({install})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it (the README's test command installs it)")
    pytest.skip(f"{message}; install it to run this test (CI never skips it)")


def need_peers() -> None:
    """Every benchmark peer, for a test marked `peers`."""
    for name in PEERS:
        need_module(name, PEERS_INSTALL)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("peers") is not None:
        need_peers()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture(scope="session")
def pg_server() -> str:
    need_service("PostgreSQL", "127.0.0.1", 5432)
    return PG_ADMIN_URL


#: fixtures that reach a server, and the marker each implies
SERVICE_FIXTURES = {"pg_server": "postgres", "pg_url": "postgres", "rabbit_url": "rabbitmq"}
SERVICE_MARKS = ("postgres", "rabbitmq")
#: parameter ids that name a PostgreSQL case of a test parametrized over stores
PG_PARAMS = {"postgres", "postgresql", "pg"}


def services_of(item: pytest.Item) -> set[str]:
    """The servers `item` needs: from its fixtures, its markers, its parameter ids."""
    needs = {mark for name, mark in SERVICE_FIXTURES.items() if name in item.fixturenames}
    needs |= {m.name for m in item.iter_markers() if m.name in SERVICE_MARKS}
    callspec = getattr(item, "callspec", None)
    if callspec is not None and PG_PARAMS & set(callspec.id.split("-")):
        needs.add("postgres")
    return needs


#: folders and modules (paths from the repository root) whose every test is `slow`, and
#: why: each test launches processes (the CLI, workers, a dashboard, Chromium) that import
#: jobfsm afresh, which is most of the fast tier's CPU when they are in it. What the inner
#: loop keeps of the same code: the worker loop on the memory store and `jobfsm worker`'s
#: options (tests/unit/test_worker*.py), the CLI under hostile input
#: (tests/integration/test_hostile_input.py), every command's help (tests/docs), the
#: dashboard's pages through Starlette's TestClient, SQLite from several processes
#: (tests/integration/sqlite).
SLOW_PATHS = {
    "tests/acceptance/": "runs `jobfsm` (CLI, worker, demo) as a subprocess, often a dozen times",
    "tests/integration/worker/": "starts `jobfsm worker` processes and kills them",
    "tests/integration/chaos/": "three workers, one SIGKILLed every 1-2 s for 20 s",
    "tests/dashboard/test_browser.py": "a dashboard process driven by headless Chromium",
    "tests/dashboard/test_browser_dependencies.py": "the same",
    "tests/dashboard/test_browser_history.py": "the same",
    "tests/dashboard/test_browser_lifecycle.py": "the same",
    "tests/dashboard/test_browser_workers.py": "the same, after worker processes are killed",
    "tests/dashboard/test_control_browser.py": "the same",
}


#: fixtures that give a test broker names (queues, exchanges) no other test uses: a
#: RabbitMQ test with one of them runs beside any other; one without may use the broker's
#: default names (`jobfsm.default`, a peer's own queues), which tests of the `rabbitmq`
#: xdist group share one after another
OWN_BROKER_NAMES = {"prefix", "fresh"}


def slow_path(item: pytest.Item) -> bool:
    """Whether `item` lives in one of SLOW_PATHS."""
    path = item.path.relative_to(item.config.rootpath).as_posix()
    return any(path.startswith(prefix) for prefix in SLOW_PATHS)


#: the longest tests, each with its wall-clock seconds per case (the mean of two full runs
#: in fresh clones beside another job's benchmarks on the 2-core machine, load 8-15, #38):
#: `--dist loadgroup` hands out single tests in collection order, so these are collected
#: first, longest first, and start on the first free workers. Collected in file order,
#: the exhaustive CI scope started 16 minutes into a run, and the coverage run on three
#: stores, once the others were first, 19 minutes into one and ended it 80 s after the
#: other workers. Only the order changes; a test missing here runs after these, as before.
LONG_FIRST: dict[tuple[str, str], float] = {
    (
        "test_fault_coverage",
        "test_the_quick_suite_on_every_store_keeps_every_module_at_its_bound",
    ): 391,
    ("test_lowest_bounds", "test_jobfsm_works_with_every_dependency_at_its_lower_bound"): 322,
    ("test_exhaustive", "test_the_ci_scope_is_explored_within_its_budget"): 302,
    ("test_faults_postgres", "test_invariants_hold_under_faults"): 174,
    (
        "test_exhaustive",
        "test_the_tiny_scope_on_sqlite_reaches_the_states_it_reaches_on_memory",
    ): 147,
    ("test_faults_sqlite", "test_invariants_hold_under_faults"): 128,
    ("test_faults_memory", "test_invariants_hold_under_faults"): 121,
    ("test_faults_postgres_async", "test_invariants_hold_with_the_async_engine_under_faults"): 118,
    ("test_faults_postgres", "test_fault_models_hold"): 107,
    (
        "test_readme_install",
        "test_readme_install_in_a_fresh_venv_has_no_peers_or_dev_tools_and_runs_the_demo",
    ): 95,
    ("test_faults_parallel", "test_a_run_in_two_processes_reports_every_part_as_one_run"): 71,
    (
        "test_fault_models",
        "test_the_report_counts_checks_per_promise_and_the_spec_pairs_reached",
    ): 68,
    (
        "test_faults_cli",
        "test_jobfsm_faults_exits_0_and_summarizes_faults_and_checks_when_all_hold",
    ): 61,
    ("test_rabbitmq_faults", "test_jobfsm_faults_runs_the_delivery_model_against_the_broker"): 61,
    ("test_postgres_stateful", "test_postgres_agrees_with_the_memory_store_after_every_step"): 61,
    ("test_faults_sqlite", "test_fault_models_hold"): 55,
    ("test_faults_memory", "test_fault_models_hold"): 51,
    ("test_first_hour", "test_faults_reports_a_truthful_step_count"): 48,
    (
        "test_bench_dashboard",
        "test_the_dashboard_benchmark_requests_every_page_at_a_small_size",
    ): 46,
    (
        "test_control_browser",
        "test_a_bulk_requeue_of_1000_failed_jobs_audits_1000_entries_as_the_operator",
    ): 40,
    (
        "test_fault_models",
        "test_the_commits_model_breaks_connections_before_and_after_commit_on_both_paths",
    ): 39,
    ("test_unique_processes", "test_racing_processes_leave_exactly_one_live_job_per_key"): 37,
    ("test_faults_cli", "test_jobfsm_faults_writes_its_report_as_json"): 35,
    ("test_faults_cli", "test_jobfsm_faults_is_quiet_by_default_and_verbose_shows_the_logs"): 35,
    ("test_sqlite_stateful", "test_sqlite_agrees_with_the_memory_store_after_every_step"): 35,
    (
        "test_faults_schedules",
        "test_a_held_pass_meets_a_whole_pass_of_another_leading_scheduler",
    ): 34,
    (
        "test_faults_parallel",
        "test_children_end_with_a_killed_parent_and_remove_their_scratch_files",
    ): 34,
    (
        "test_retention_processes",
        "test_three_workers_prune_one_at_a_time_within_bounds_across_kill_and_stop",
    ): 34,
    # each of its 57 cases (10-25 s)
    ("test_mutants", "test_jobfsm_faults_at_default_size_kills_a_production_mutant"): 20,
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--issue-size",
        action="store_true",
        help="also run the cases marked `issue_size` (an issue's full size, beside the "
        "smaller size every run keeps)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # an issue's full size (`issue_size`) runs on request only: each such test keeps a
    # smaller case of the same behaviour in every run, CI's included (#38: the limits
    # under kill -9 at 8 workers x 32 threads were 20 s of CPU of each full run)
    if not config.getoption("--issue-size"):
        kept = [item for item in items if item.get_closest_marker("issue_size") is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept
    for item in items:
        if slow_path(item) and item.get_closest_marker("slow") is None:
            item.add_marker("slow")
        needs = services_of(item)
        for name in sorted(needs):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        if needs:
            item.add_marker("services")
        alone = item.get_closest_marker("broker_settings") is not None
        if "rabbitmq" in needs and (alone or not OWN_BROKER_NAMES & set(item.fixturenames)):
            item.add_marker(pytest.mark.xdist_group("rabbitmq"))
    # the tests that hold the broker alone go first in their group, at the start of the
    # run, while the other RabbitMQ tests are short: one waiting behind the group's long
    # tests (a quick benchmark run, 100 s) would hold every other one back meanwhile;
    # then the known long tests, longest first (LONG_FIRST), and the rest as collected
    items.sort(
        key=lambda item: (
            item.get_closest_marker("broker_settings") is None,
            -LONG_FIRST.get((item.path.stem, getattr(item, "originalname", item.name)), 0),
        )
    )


class LoadGroupShim:
    """Shows pytest-xdist's `loadgroup` scheduler the `xdist_group` of each test.

    Each xdist worker tells the controller the node ids it collected; `loadgroup` reads a
    test's group from a suffix on its id (`path::test@group`) and sends every test of one
    group to one worker as one unit, which that worker runs one test after another. xdist
    3.8 adds the suffix in its own `pytest_collection_modifyitems` by setting
    `item._nodeid`; pytest 9.2 keeps the id in `item._id` (a `NodeId`), so the suffix
    never reaches the controller and grouped tests are spread like any others
    (pytest-dev/pytest-xdist#1386; the fix, #1388, is not released). This hook runs after
    every other `pytest_collection_modifyitems` (ours marks the group, xdist's tries to
    rename) and writes the same suffix, computed as xdist does, where pytest 9.2 reads it.
    It changes nothing when the id already carries the suffix (an older pytest, or a
    fixed xdist), without `--dist loadgroup`, and outside an xdist worker.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if not getattr(config.option, "loadgroup", False):  # set in xdist workers only
            return
        for item in items:
            names = {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
            suffix = "@" + "_".join(sorted(names))
            if not names or item.nodeid.endswith(suffix):
                continue
            from _pytest.nodeid import NodeId  # pytest 9.2's id; older ones took xdist's

            item._id = NodeId.parse(item.nodeid + suffix)


#: the folders whose modules the suite's processes import (compiled once by `warm_bytecode`)
SOURCE_DIRS = ("fsm", "adapters", "benchmarks", "examples", "tests")


def warm_bytecode(config: pytest.Config) -> None:
    """Compile, once and before any xdist worker starts, what every worker would compile.

    In a fresh clone there is no bytecode yet: each of the six workers compiled the
    modules of fsm/, adapters/ and the rest, and pytest's assertion rewriting compiled
    every test module again, all at the same time (about 7 s of CPU per worker on the
    2-core machine, #38). Here the controller writes them once: `compileall` for the
    plain modules, and for the test modules under this run's paths pytest's rewrite
    (`rewrite_asserts`) in the cache file its import hook reads, in the format it writes
    (PEP 552, checked hash). A file already fresh is left as it is; a file the hook
    cannot use (another pytest's format) is rewritten by each worker as before, so the
    worst a change of pytest costs is this head start, never a stale test.
    """
    import compileall
    import importlib.util
    import marshal
    import re

    from _pytest.assertion import rewrite

    root = config.rootpath
    test_file = re.compile(r"(^|/)(test_[^/]*|conftest)\.py$")
    for name in SOURCE_DIRS:
        if (root / name).is_dir():
            compileall.compile_dir(root / name, quiet=2, workers=2, rx=test_file)
    if config.getoption("assertmode") != "rewrite":
        return
    for path in _test_modules(config):
        source = path.read_bytes()
        header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00"
        header += importlib.util.source_hash(source)[:8]
        pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
        with contextlib.suppress(OSError), pyc.open("rb") as old:
            if old.read(16) == header:
                continue
        tree = ast.parse(source, filename=str(path))
        rewrite.rewrite_asserts(tree, source, str(path), config)
        code = compile(tree, str(path), "exec", dont_inherit=True)
        pyc.parent.mkdir(exist_ok=True)
        partial = pyc.with_name(f"{pyc.name}.{os.getpid()}")
        partial.write_bytes(header + marshal.dumps(code))
        partial.replace(pyc)  # atomic: a worker reads the old file or the whole new one


def _test_modules(config: pytest.Config) -> list[Path]:
    """The test modules and conftests under this run's paths (or testpaths)."""
    found: set[Path] = set()
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = path if path.is_absolute() else config.invocation_params.dir / path
        if path.is_file() and path.suffix == ".py":
            found.add(path.resolve())
        elif path.is_dir():
            for pattern in ("test_*.py", "conftest.py"):
                found.update(
                    p.resolve() for p in path.rglob(pattern) if "__pycache__" not in p.parts
                )
    return sorted(found)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LoadGroupShim(), "jobfsm-loadgroup-shim")
    numprocesses = getattr(config.option, "numprocesses", None)
    if numprocesses and not hasattr(config, "workerinput"):  # the xdist controller
        warm_bytecode(config)


@pytest.fixture
def pg_url(pg_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database for one test, dropped afterwards."""
    import psycopg

    if request.node.get_closest_marker("services") is None:
        pytest.fail(
            f"{request.node.nodeid} uses PostgreSQL but is not marked `services`: ask for "
            "pg_url as a fixture, name its parameter 'postgres', or mark it postgres"
        )

    name = f"jobfsm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _broker_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """A RabbitMQ test holds the broker shared, or alone when it is marked
    `broker_settings` (it changes what every client meets): tests/broker_lock.py."""
    if request.node.get_closest_marker("rabbitmq") is None:
        yield
        return
    from tests import broker_lock

    alone = request.node.get_closest_marker("broker_settings") is not None
    with broker_lock.hold(exclusive=alone):
        yield


@pytest.fixture(scope="session")
def rabbit_url() -> str:
    need_service("RabbitMQ", "127.0.0.1", 5672)
    return RABBIT_URL
