"""The broker and the database are shared (other applications, other test runs): no test,
tool or fault model acts on what it did not create.

`rabbitmqctl close_all_connections` drops every client of the broker and `stop_app` stops
the broker for everyone: broker faults go through a relay the run owns
(adapters/rabbitmq/relay.py). Library, adapter, benchmark and example code never ends a
PostgreSQL backend (tests may end their own, found in their own database)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", ".git", "node_modules", ".hypothesis"}
BROKER_WIDE = re.compile(r"close_all_connections|\bstop_app\b|\bstart_app\b|close_all_user")
BACKEND_KILL = re.compile(r"pg_terminate_backend|pg_cancel_backend")


def _code_files() -> list[Path]:
    found = [ROOT / ".ci" / "run"]
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP or not path.is_file():
            continue
        if path.suffix in (".py", ".sh", ".toml", ".cfg") and path != Path(__file__):
            found.append(path)
    return found


def test_no_code_runs_a_broker_wide_command() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _code_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BROKER_WIDE.search(line)
    ]
    assert not offenders, f"broker-wide commands (use a Relay instead): {offenders}"


def test_no_library_tool_or_benchmark_ends_a_database_backend() -> None:
    roots = ("fsm", "adapters", "benchmarks", "examples")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _code_files()
        if path.relative_to(ROOT).parts[0] in roots
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BACKEND_KILL.search(line)
    ]
    assert not offenders, f"code that ends PostgreSQL backends: {offenders}"


def test_the_checks_see_the_code_they_guard() -> None:
    # the scan reaches the fault model and the tests (a wrong ROOT would pass vacuously)
    names = {str(p.relative_to(ROOT)) for p in _code_files()}
    assert "adapters/rabbitmq/testing.py" in names
    assert "tests/integration/rabbitmq/test_rabbitmq_recovery.py" in names
