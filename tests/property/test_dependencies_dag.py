"""Random DAGs of dependent jobs with random failures and crashes, on every store.

Hypothesis draws a DAG (each job may wait for up to three earlier jobs, with a
random on_failed_dependency rule), an outcome per job (succeed, fail, ambiguous,
cancelled by an operator) and a schedule: which runnable job goes next, whether the
process "dies" right after writing a job's last state (so nobody releases its
dependents and only the recovery sweep can), and when sweeps run.

Checked: at the moment a dependent is leased, every prerequisite has succeeded (or,
with the run rule, has finished); a job whose rule is cancel never runs after one of
its prerequisites failed; under fair scheduling every job ends final, in exactly the
state the model predicts; and every audit trail replays to its record.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.memory import MemoryStore
from fsm import open_store
from fsm.clock import FakeClock
from fsm.errors import IllegalTransition
from fsm.inputs import KindPolicy
from fsm.lifecycle.core import decide
from fsm.lifecycle.invariants import trail_problems
from fsm.policies import Policy, RetryPolicy
from fsm.ports import Store, TracksDependencies
from fsm.records import Job, Owner
from fsm.service import maintenance as recovery
from fsm.service.engine import Engine

OUTCOMES = ("succeed", "fail", "ambiguous", "cancel")
RULES = ("cancel", "run", "investigate")
#: rounds of the fair scheduler before every job must be final (a DAG of 12 needs 12)
ROUNDS = 40
WORKER = Owner(host="dag-host", pid=4242, incarnation="dag")


@st.composite
def dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(2, 12))
    jobs = []
    for i in range(n):
        after = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        jobs.append(
            {
                "after": after,
                "rule": draw(st.sampled_from(RULES)),
                "outcome": draw(st.sampled_from(OUTCOMES)),
            }
        )
    return jobs


def expected_states(dag: list[dict[str, Any]]) -> list[set[str]]:
    """The model: the states each job may end in, in submit order (prerequisites first).

    One job may end two ways: one an operator cancels whose rule is investigate, when a
    prerequisite was cancelled before it (its rule parks it first) or after it."""
    out: list[set[str]] = []
    ends = {"succeed": "succeeded", "fail": "failed", "ambiguous": "investigate"}
    for spec in dag:
        may_fail = any(out[p] != {"succeeded"} for p in spec["after"])
        must_fail = any("succeeded" not in out[p] for p in spec["after"])
        assert may_fail == must_fail  # only a cancelled job has two ends, never succeeded
        if spec["outcome"] == "cancel":
            out.append(
                {"cancelled", "investigate"}
                if must_fail and spec["rule"] == "investigate"
                else {"cancelled"}
            )
        elif must_fail and spec["rule"] == "cancel":
            out.append({"cancelled"})
        elif must_fail and spec["rule"] == "investigate":
            out.append({"investigate"})
        else:
            out.append({ends[spec["outcome"]]})
    return out


def run_dag(store: Store, dag: list[dict[str, Any]], data: st.DataObject) -> None:
    assert isinstance(store, TracksDependencies)
    clock = FakeClock()
    queue = f"dag-{uuid.uuid4().hex[:10]}"
    engine = Engine(
        store,
        clock=clock,
        policy=Policy(retry=RetryPolicy(max_attempts=1)),
        kinds={"dag": KindPolicy(queue=queue)},
    )
    ids: list[str] = []
    for i, spec in enumerate(dag):
        job = engine.submit(
            "dag",
            {"i": i},
            after=[ids[p] for p in spec["after"]] or None,
            on_failed_dependency=spec["rule"] if spec["after"] else None,
        )
        ids.append(job.id)
        # ids sort by their millisecond, then at random: one ms apart they sort in submit
        # order, so a sweep's slice of waiting jobs (id order) is the same when
        # hypothesis replays an example
        clock.advance(0.001)
    index = {jid: i for i, jid in enumerate(ids)}
    finals = engine.final_states

    def check_lease(job: Job) -> None:
        spec = dag[index[job.id]]
        states = store.prerequisites([job.id]).get(job.id, {})
        assert set(states) == {ids[p] for p in spec["after"]}
        for pid, state in states.items():
            if spec["rule"] == "run":
                assert state in finals, f"job {index[job.id]} leased while {pid} is {state}"
            else:
                assert state == "succeeded", f"job {index[job.id]} leased while {pid} is {state}"

    def finish(job: Job, crash: bool) -> None:
        outcome = dag[index[job.id]]["outcome"]
        event, args = {
            "succeed": ("succeed", {"result_json": "1"}),
            "fail": ("fail", {"error": "boom", "permanent": True}),
            "ambiguous": ("ambiguous", {"error": "unknown"}),
        }[outcome]
        if crash:  # written, then the process dies before it releases anything
            current = store.get(job.id)
            assert current is not None
            d = decide(current, event, clock.now(), engine.policy, fence=job.fence, **args)
            (written,) = store.apply([d])
            assert isinstance(written, Job)
        else:
            engine.transition(job.id, event, fence=job.fence, **args)

    planned = [jid for jid in ids if dag[index[jid]]["outcome"] == "cancel"]
    for jid in data.draw(st.permutations(planned), label="cancel order"):
        # an operator cancels it while it waits or is queued; its dependents follow (one
        # its rule already parked in investigate can no longer be cancelled)
        with contextlib.suppress(IllegalTransition):
            engine.cancel(jid, actor="dag", reason="planned cancel")
    for _ in range(ROUNDS):
        current = {jid: store.get(jid) for jid in ids}
        if all(j is not None and j.state in finals for j in current.values()):
            break
        # in submit order: a claim orders same-time jobs by their random ids, and the
        # draws below must see the same list when hypothesis replays an example
        claimed = engine.claim(WORKER, queues=[queue], limit=len(ids))
        runnable = sorted(claimed, key=lambda j: index[j.id])
        order = data.draw(st.permutations(runnable), label="run order")
        for job in order:
            check_lease(job)
            started = engine.start(job.id, job.fence)
            finish(started, crash=data.draw(st.booleans(), label="crash after write"))
        if not runnable:  # fair scheduling: with nothing to run, the sweep comes round
            recovery.sweep(engine)
        elif data.draw(st.booleans(), label="sweep"):
            recovery.sweep(engine, limit=data.draw(st.integers(1, 4), label="sweep slice"))
        clock.advance(1.0)
    final = [store.get(jid) for jid in ids]
    states = [j.state if j is not None else "lost" for j in final]
    expected = expected_states(dag)
    assert all(got in may for got, may in zip(states, expected, strict=True)), (
        f"dag {dag}: ended {states}, expected {expected}"
    )
    for job in final:
        assert job is not None
        assert trail_problems(job, store.history(job.id), engine.spec, engine.policy) == []


# --- one test per store ------------------------------------------------------------------

DAG_SETTINGS = settings(max_examples=60, deadline=None)


@DAG_SETTINGS
@given(dag=dags(), data=st.data())
def test_random_dags_on_the_memory_store(dag: list[dict[str, Any]], data: st.DataObject) -> None:
    run_dag(MemoryStore(), dag, data)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Callable[[], Store]]:
    numbers = itertools.count()
    opened: list[Store] = []

    def make() -> Store:
        store = open_store(f"sqlite:///{tmp_path / f'dag-{next(numbers)}.db'}")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_random_dags_on_sqlite_files(sqlite_store: Callable[[], Store]) -> None:
    @DAG_SETTINGS
    @given(dag=dags(), data=st.data())
    def check(dag: list[dict[str, Any]], data: st.DataObject) -> None:
        store = sqlite_store()
        try:
            run_dag(store, dag, data)
        finally:
            store.close()

    check()


@pytest.mark.postgres
def test_random_dags_on_postgresql(pg_url: str) -> None:
    store = open_store(f"{pg_url}?pool_min=1&pool_max=2")
    try:

        @settings(DAG_SETTINGS, max_examples=30)
        @given(dag=dags(), data=st.data())
        def check(dag: list[dict[str, Any]], data: st.DataObject) -> None:
            run_dag(store, dag, data)  # each example in a queue of its own

        check()
    finally:
        store.close()
