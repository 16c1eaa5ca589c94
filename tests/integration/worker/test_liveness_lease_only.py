"""Real workers in lease-only liveness (as on macOS), forced on Linux with JOBFSM_LIVENESS.

A worker killed with SIGKILL is not confirmed dead by its pid: on SQLite its run is
recovered when the lease lapses; on PostgreSQL the liveness lock still confirms the
death at once. Either way the job is re-run once and nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fsm import Engine
from fsm.service.identity import LIVENESS_ENV

from .helpers import Workers, markers, wait_for


def test_a_killed_lease_only_worker_is_recovered_by_lease_or_by_the_stores_lock(
    store_url: str,
    workers: Workers,
    marks: Path,
    open_engine: Callable[[str], Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given two lease-only workers on this host, A running a retry-safe job
    monkeypatch.setenv(LIVENESS_ENV, "lease")
    engine = open_engine(store_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    a = workers.start(store_url, ttl=3.0, heartbeat=0.5)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
    b = workers.start(store_url, ttl=3.0, heartbeat=0.5)
    workers.wait_serving(b)
    assert "liveness is lease-only" in workers.log_of(b)
    # when A is killed with SIGKILL
    workers.kill9(a)
    # then the job is re-run once, and its expire says how the death was known: never
    # by A's pid (lease-only), by the lapsed lease on SQLite, by the free lock on PostgreSQL
    wait_for(lambda: engine.get(job.id).state == "succeeded", 20, "the job to be re-run")
    assert len(markers(marks, job.id, "started")) == 2
    (expire,) = [e for e in engine.history(job.id) if e.event == "expire"]
    expected = "owner_dead_lock_free" if store_url.startswith("postgres") else "lease_lapsed"
    assert expire.code == expected
    assert f"pid {a.pid} is gone" not in (expire.error or "")
