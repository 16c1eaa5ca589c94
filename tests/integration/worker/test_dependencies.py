"""Dependent jobs run by real `jobfsm worker` processes (SQLite file and PostgreSQL).

A job submitted with `after=` starts only once its prerequisites succeeded, as the
marker files the handlers leave show from outside (a dependent's start is never
before its prerequisites' end); a failed prerequisite applies each dependent's rule;
and a prerequisite finished by a process that died before releasing anything is
released by a worker's recovery sweep. Timings are small (sweep 0.5 s).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fsm import Engine
from fsm.lifecycle.core import decide
from fsm.records import Job, Owner

from .helpers import Workers, markers, wait_for

#: the owner of a process that is gone: it wrote its job's success and released nothing
DEAD = Owner(host="dead-host", pid=999_999, incarnation="dead")


def _mtime(marks: Path, job: Job, what: str) -> float:
    found = markers(marks, job.id, what)
    assert found, f"job {job.id} left no {what!r} marker"
    return min(p.stat().st_mtime for p in found)


def test_a_diamond_runs_in_dependency_order_on_two_workers(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: A and B run for a moment each; C waits for both, D waits for C
    engine = open_engine(store_url)
    work = {"dir": str(marks), "first": 0.3, "then": 0.3}
    a = engine.submit("sleep", work)
    b = engine.submit("sleep", work)
    c = engine.submit("sleep", work, after=[a.id, b.id])
    d = engine.submit("sleep", work, after=[c.id])
    assert (c.state, d.state) == ("waiting", "waiting")

    # when: two worker processes run them
    for _ in range(2):
        workers.start(store_url)
    wait_for(lambda: engine.get(d.id).state == "succeeded", 30, "D to succeed")

    # then: C started after A and B were done, D after C was done, each once
    assert _mtime(marks, c, "started") >= max(_mtime(marks, a, "done"), _mtime(marks, b, "done"))
    assert _mtime(marks, d, "started") >= _mtime(marks, c, "done")
    for job in (a, b, c, d):
        assert len(markers(marks, job.id, "started")) == 1
    released = [e for e in engine.history(c.id) if e.event == "dependencies_met"]
    assert len(released) == 1
    assert released[0].data["prerequisites"] == {a.id: "succeeded", b.id: "succeeded"}


def test_a_failed_prerequisite_applies_each_dependents_rule(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a prerequisite that fails for good, and three dependents with three rules
    engine = open_engine(store_url)
    work = {"dir": str(marks)}
    bad = engine.submit("refuse", work)
    cancel = engine.submit("sleep", work, after=[bad.id])
    run = engine.submit("sleep", work, after=[bad.id], on_failed_dependency="run")
    park = engine.submit("sleep", work, after=[bad.id], on_failed_dependency="investigate")

    # when: a worker runs what it may
    workers.start(store_url)
    final = engine.final_states
    wait_for(
        lambda: all(engine.get(j.id).state in final for j in (bad, cancel, run, park)),
        30,
        "every job to end",
    )

    # then: cancel never ran, run ran anyway, investigate is parked and never ran
    assert engine.get(bad.id).state == "failed"
    assert engine.get(cancel.id).state == "cancelled"
    assert engine.get(run.id).state == "succeeded"
    assert engine.get(park.id).state == "investigate"
    assert not markers(marks, cancel.id, "started")
    assert not markers(marks, park.id, "started")
    assert bad.id in (engine.get(cancel.id).last_error or "")


def test_a_workers_sweep_releases_a_dependent_a_dead_process_left_waiting(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: the prerequisite's success was written by a process that died before it
    # released anything (the decision is applied to the store directly)
    engine = open_engine(store_url)
    a = engine.submit("noop", None)
    c = engine.submit("sleep", {"dir": str(marks)}, after=[a.id])
    now = engine.clock.now()
    owner = engine.claim(DEAD, ids=[a.id])[0]
    for event, args in (("start", {}), ("succeed", {"result_json": "null"})):
        current = engine.get(a.id)
        d = decide(current, event, now, engine.policy, fence=owner.fence, **args)
        engine.store.apply([d])
    assert engine.get(a.id).state == "succeeded"
    assert engine.get(c.id).state == "waiting"

    # when: a worker starts; then: its recovery sweep releases C and it runs
    workers.start(store_url)
    wait_for(lambda: engine.get(c.id).state == "succeeded", 30, "C to be released and run")
    assert [e.event for e in engine.history(c.id)][:2] == ["submit", "dependencies_met"]


def test_a_prerequisite_whose_worker_is_killed_is_recovered_and_then_releases(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: worker A runs a long, retry-safe prerequisite; C waits for it
    engine = open_engine(store_url)
    a = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    c = engine.submit("sleep", {"dir": str(marks)}, after=[a.id])
    first = workers.start(store_url, ttl=30.0)
    wait_for(lambda: markers(marks, a.id, "started", 1), 20, "A's first attempt to start")

    # when: A's worker is killed with SIGKILL and another worker takes over
    workers.kill9(first)
    workers.start(store_url, ttl=30.0)

    # then: A is rerun, succeeds, and only then C runs
    wait_for(lambda: engine.get(c.id).state == "succeeded", 30, "C to run after A's rerun")
    assert _mtime(marks, c, "started") >= _mtime(marks, a, "done")
    assert engine.get(a.id).recoveries == 1
