"""Marks and reconcilers with real `jobfsm worker` processes killed with SIGKILL.

A "charge" handler marks, charges a fake provider (a table in a SQLite file of its
own) and returns (tests/integration/worker/outside_app.py). Workers are killed at
chosen and at random points; other workers' recovery sweeps take the runs back. Every
job must end with exactly one charge, or in investigate with a reason code; a run lost
before its mark is re-run; each reconciler answer leads to the documented state, and
the audit trail records it. On SQLite and PostgreSQL job stores.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from fsm import Engine
from fsm.lifecycle.invariants import trail_problems
from fsm.lifecycle.spec import lifecycle
from fsm.policies import Policy

from .helpers import Workers, engine_factory, markers, wait_for
from .outside_app import charges, handlers

APP = "tests.integration.worker.outside_app:handlers"


@attrs.frozen
class Outside:
    """One test's job store, workers, marker folder, provider file and engine."""

    url: str
    workers: Workers
    marks: Path
    provider: str
    engine: Engine


@pytest.fixture
def outside(store_url: str, workers: Workers, marks: Path, tmp_path: Path) -> Iterator[Outside]:
    for make in engine_factory(handlers):
        yield Outside(store_url, workers, marks, str(tmp_path / "provider.db"), make(store_url))


def _start(workers: Workers, url: str, executor: str = "thread") -> Any:
    proc = workers.start(url, app=APP, ttl=30.0, heartbeat=0.5, executor=executor)
    workers.wait_serving(proc)
    return proc


def _final(engine: Engine, job_id: str, timeout: float = 30.0) -> Any:
    wait_for(
        lambda: engine.get(job_id).state in engine.final_states, timeout, f"job {job_id} to end"
    )
    return engine.get(job_id)


def _sound(engine: Engine, job_id: str) -> None:
    job = engine.get(job_id)
    assert trail_problems(job, engine.history(job_id), lifecycle(), Policy()) == []


def _killed_at(o: Outside, job_id: str, point: str, executor: str = "thread") -> None:
    """Run the job on a worker, SIGKILL it once the handler reached `point`, and start a
    second worker whose start-up sweep takes the run back (same host: pid gone)."""
    first = _start(o.workers, o.url, executor)
    wait_for(lambda: markers(o.marks, job_id, point, 1), 30, f"the handler to reach {point}")
    o.workers.kill9(first)
    _start(o.workers, o.url, executor)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_run_lost_before_its_mark_is_run_again_and_charges_once(
    outside: Outside,
    executor: str,
) -> None:
    o = outside
    engine, marks, provider = o.engine, o.marks, o.provider
    job = engine.submit("charge", {"dir": str(marks), "provider_db": provider, "before": 60})
    # when its worker is killed before the handler marked (and so before it charged)
    _killed_at(o, job.id, "started", executor)
    # then the run is re-run at once (not retry-safe, but lost before any outside call)
    final = _final(engine, job.id)
    trail = engine.history(job.id)
    expire = next(e for e in trail if e.event == "expire")
    assert (expire.to_state, expire.code) == ("retry_wait", "owner_dead_pid_gone")
    assert not [e for e in trail if e.event == "reconcile"]  # nobody had to be asked
    assert final.state == "succeeded"
    assert final.attempt == 2
    (made,) = charges(provider, job.id)  # charged once, by the re-run
    assert made[2] == final.fence
    _sound(engine, job.id)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_mark_is_stored_before_the_outside_call_and_shown_in_the_trail(
    outside: Outside,
    executor: str,
) -> None:
    o = outside
    engine, workers, marks, provider, store_url = o.engine, o.workers, o.marks, o.provider, o.url
    job = engine.submit("charge", {"dir": str(marks), "provider_db": provider, "between": 60})
    _start(workers, store_url, executor)
    wait_for(lambda: markers(marks, job.id, "marked", 1), 30, "the handler to mark")

    mark = next(e for e in engine.history(job.id) if e.event == "mark")

    assert mark.code == "mark"
    assert mark.data["external_id"] == f"charge-{job.id}"
    assert mark.fence == engine.get(job.id).fence
    assert engine.get(job.id).marks == 1
    assert not charges(provider, job.id)  # the mark came first


ANSWERS = [
    # kind, where the run is lost, final state, the reconcile entry's code
    ("charge", "charged", "succeeded", "reconciled_done"),
    ("charge", "marked", "succeeded", "reconciled_not_started"),
    ("charge_slow", "charged", "succeeded", "reconciled_still_running"),
    ("charge_unknown", "charged", "investigate", "reconciled_unknown"),
    ("charge_raises", "charged", "investigate", "reconciler_failed"),
    ("charge_hangs", "charged", "investigate", "reconciler_failed"),
    ("charge_garbage", "charged", "investigate", "reconciler_failed"),
    ("charge_plain", "charged", "investigate", "not_retry_safe"),
]


@pytest.mark.parametrize(("kind", "point", "state", "code"), ANSWERS)
def test_a_reconciler_answer_leads_to_the_documented_state_audited(
    outside: Outside,
    kind: str,
    point: str,
    state: str,
    code: str,
) -> None:
    o = outside
    engine, marks, provider = o.engine, o.marks, o.provider
    # a run that charged (or only marked) and then waits, killed at that point
    payload = {"dir": str(marks), "provider_db": provider, "between": 0, "after": 60}
    if point == "marked":
        payload["between"] = 60
    job = engine.submit(kind, payload)
    _killed_at(o, job.id, point)

    final = _final(engine, job.id)

    assert final.state == state
    codes = [e.code for e in engine.history(job.id)]
    assert code in codes
    assert len(charges(provider, job.id)) == 1  # charged once, whatever the answer
    if state == "succeeded" and code != "reconciled_not_started":
        assert final.result == {"charge": charges(provider, job.id)[0][0], "reconciled": True}
        assert not markers(marks, job.id, "started", 2)  # never run again
    if code == "reconciled_not_started":
        assert markers(marks, job.id, "started", 2)  # re-run, charged once
    if state == "investigate":
        entry = engine.history(job.id)[-1]
        assert entry.code == code
        if kind == "charge_hangs":
            assert "hung" in (entry.error or "")
    _sound(engine, job.id)


def test_random_kills_leave_every_job_charged_once_or_investigated_with_a_code(
    outside: Outside,
) -> None:
    o = outside
    engine, workers, marks, provider, store_url = o.engine, o.workers, o.marks, o.provider, o.url
    rng = random.Random(16)
    jobs = [
        engine.submit(
            "charge",
            {
                "dir": str(marks),
                "provider_db": provider,
                "before": rng.uniform(0, 1.5),
                "between": rng.uniform(0, 1.5),
                "after": rng.uniform(0, 1.5),
            },
        )
        for _ in range(6)
    ]
    # workers killed with SIGKILL at random moments, each replaced by a fresh one
    current = _start(workers, store_url)
    for _ in range(4):
        time.sleep(rng.uniform(0.3, 2.0))
        workers.kill9(current)
        current = _start(workers, store_url)
    for job in jobs:
        _final(engine, job.id, timeout=60)

    for job in jobs:
        final = engine.get(job.id)
        made = charges(provider, job.id)
        assert len(made) <= 1, f"job {job.id} charged {len(made)} times"
        if final.state == "succeeded":
            assert len(made) == 1
        else:
            assert final.state == "investigate"
            assert engine.history(job.id)[-1].code in lifecycle().codes
        _sound(engine, job.id)


def test_a_worker_without_the_reconciler_leaves_the_lost_run_to_one_that_has_it(
    outside: Outside,
) -> None:
    o = outside
    job = o.engine.submit("charge", {"dir": str(o.marks), "provider_db": o.provider, "after": 60})
    first = _start(o.workers, o.url)
    wait_for(lambda: markers(o.marks, job.id, "charged", 1), 30, "the charge")
    o.workers.kill9(first)
    # a worker of another app (no "charge" handler, so no reconciler) sweeps for a while
    other = o.workers.start(o.url, ttl=30.0, heartbeat=0.5)
    o.workers.wait_serving(other)
    time.sleep(2.0)  # four of its sweeps
    assert o.engine.get(job.id).state == "running"
    # a worker that has the reconciler settles it
    _start(o.workers, o.url)
    final = _final(o.engine, job.id)
    assert final.state == "succeeded"
    assert [e.code for e in o.engine.history(job.id)][-2:] == [
        "owner_dead_pid_gone",
        "reconciled_done",
    ]
    assert len(charges(o.provider, job.id)) == 1


def test_a_worker_killed_while_its_reconciler_runs_leaves_the_job_to_investigate(
    outside: Outside,
) -> None:
    o = outside
    job = o.engine.submit(
        "charge_asking", {"dir": str(o.marks), "provider_db": o.provider, "after": 60}
    )
    _killed_at(o, job.id, "charged")  # the second worker's sweep claims and asks
    wait_for(lambda: list(o.marks.glob(f"{job.id}.asking.*")), 30, "the reconciler to run")
    claimed = o.engine.get(job.id)
    assert claimed.state == "reconciling"
    # when the asking worker is killed mid-question, and a third one starts
    asking = next(p for p in o.workers.procs if p.poll() is None)
    o.workers.kill9(asking)
    _start(o.workers, o.url)

    # then the claim is known dead at once (same host): investigate, never asked twice
    final = _final(o.engine, job.id)
    assert final.state == "investigate"
    assert o.engine.history(job.id)[-1].code == "reconciler_lost"
    assert len(list(o.marks.glob(f"{job.id}.asking.*"))) == 1
    _sound(o.engine, job.id)
