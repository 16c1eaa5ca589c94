"""The fault suite with submits and operator actions through the async engine.

`fault_machine(..., engine="async")`: submit, submit_dependent, operator cancel,
requeue and resolve go through `AsyncEngine(path="async")` (the loops of
`fsm.service.plans` under `adrive`, over PostgreSQL's asyncio twin), and the store faults
armed by the machine fire on the twin's calls as on the blocking store's. Every
invariant is read back after every step, as in test_faults_postgres.py, at the size
of half the profile's examples (100 x 50 steps under `ci`) and never below 100 x 50,
so that faults surely land on the twin's calls: at 50 x 50, 6 to 24 did until the
machine's rules grew (2026-12-07, the third blind study's), then none in the ci
profile's draws; at 100 x 50, 11.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import Phase, settings

from fsm import open_store
from fsm.errors import BadInput, TransientStoreError, VersionConflict
from fsm.service import plans
from fsm.service.drivers import AsyncPerformer
from fsm.testing import fault_machine, run_faults
from fsm.testing.faults_async import FaultyAsyncStore
from fsm.testing.profiles import run_machine

pytestmark = pytest.mark.postgres

_PROFILE = settings()


def test_invariants_hold_with_the_async_engine_under_faults(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given PostgreSQL, when the machine runs in async mode, then every invariant holds,
    and the async twin was called and had faults injected (the suite took that path)."""
    url = f"{pg_url}?pool_min=1&pool_max=2"
    machine = fault_machine(lambda: open_store(url), engine="async")
    seen: Counter[str] = Counter()
    for name in ("insert", "get", "apply", "record"):
        monkeypatch.setattr(FaultyAsyncStore, name, _counted(getattr(FaultyAsyncStore, name), seen))
    run_machine(
        machine,
        settings=settings(
            _PROFILE,
            max_examples=max(100, _PROFILE.max_examples // 2),
            stateful_step_count=max(50, _PROFILE.stateful_step_count),
        ),
    )
    assert machine.stats.examples > 0
    assert seen["insert call"] > 0, seen
    assert seen["apply call"] > 0, seen
    assert seen["insert fault"] + seen["apply fault"] + seen["get fault"] > 0, seen


def _counted(method: Any, seen: Counter[str]) -> Any:
    """`method` of FaultyAsyncStore, counting its calls and the faults it raised."""

    async def counted(self: FaultyAsyncStore, *args: Any) -> Any:
        seen[f"{method.__name__} call"] += 1
        try:
            return await method(self, *args)
        except TransientStoreError:
            seen[f"{method.__name__} fault"] += 1
            raise

    return counted


def test_the_async_mode_catches_a_broken_async_path(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given an AsyncEngine whose store answers cache each job's first read (a careless
    change to the async path only: the blocking Engine never runs it), when the async
    mode runs, then it fails: after a concurrent write injected before the twin's apply,
    the operator's compare-and-set re-reads a stale job until it gives up."""
    url = f"{pg_url}?pool_min=1&pool_max=2"
    original = AsyncPerformer.__call__
    cache: dict[str, Any] = {}

    async def cached(self: AsyncPerformer, request: plans.Request) -> Any:
        if not isinstance(request, plans.Read):
            return await original(self, request)
        if request.job_id not in cache:
            cache[request.job_id] = await original(self, request)
        return cache[request.job_id]

    monkeypatch.setattr(AsyncPerformer, "__call__", cached)
    find_only = settings(
        max_examples=200,  # stops at the first failure; the rule set moves where it falls
        stateful_step_count=50,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
    )
    with pytest.raises(VersionConflict):
        run_machine(fault_machine(lambda: open_store(url), engine="async"), settings=find_only)


def test_async_engine_mode_needs_a_store_with_an_asyncio_twin() -> None:
    """Given a SQLite URL, when the suite is asked for the async engine, then it refuses,
    naming the problem, before running anything."""
    with pytest.raises(BadInput, match="asyncio twin"):
        run_faults("sqlite:///unused.db", engine="async", examples=1, models=())


def _jobfsm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_jobfsm_faults_engine_async_runs_the_machine_on_postgresql(pg_url: str) -> None:
    # given a PostgreSQL URL; when `jobfsm faults --engine async` runs the machine
    done = _jobfsm(
        "faults", "--store", pg_url, "--engine", "async", "--model", "machine",
        "--examples", "3", "--steps", "15", "--seed", "1",
    )  # fmt: skip
    # then it exits 0 with every invariant held
    assert done.returncode == 0, done.stderr
    assert "ok: every invariant held" in done.stdout


def test_jobfsm_faults_engine_async_refuses_a_store_without_an_asyncio_twin() -> None:
    # given a SQLite URL; when the async engine is asked for
    done = _jobfsm("faults", "--store", "sqlite:///unused.db", "--engine", "async")
    # then it exits non-zero naming the problem, and nothing ran
    assert done.returncode != 0
    assert "asyncio twin" in done.stderr
    assert "invariant" not in done.stdout
