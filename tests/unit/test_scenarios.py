"""The acceptance scenarios of specs/scenarios.md (S01-S07), on the memory store and fake time.

The same scenarios run at scale in tests/property (hypothesis fault suite) and
with real processes in tests/integration/chaos.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from adapters.memory import MemoryStore
from fsm import (
    Backoff,
    CountingMetrics,
    Engine,
    FakeClock,
    IllegalTransition,
    Job,
    KindPolicy,
    LeaseLost,
    OperatorError,
    Owner,
    Policy,
    RetryPolicy,
    ScanRequest,
    TransientStoreError,
)
from fsm.lifecycle.invariants import trail_problems
from fsm.lifecycle.spec import lifecycle
from fsm.ports import PruneRequest
from fsm.service.maintenance import sweep
from fsm.testing.faults_store import FaultyStore

from .helpers import sweeper_on, token_free

A = Owner(host="host-a", pid=101, incarnation="inc-a")
#: the sweeping process, on another host: only the store's liveness probe can confirm deaths
SWEEPER = sweeper_on("sweeper-host")
B = Owner(host="host-a", pid=102, incarnation="inc-b")
POLICY = Policy.seeded(7, retry=RetryPolicy(max_attempts=3, backoff=Backoff(base=2.0, cap=30.0)))


def make_engine(store: object | None = None, **kwargs: object) -> tuple[Engine, FakeClock]:
    clock = FakeClock()
    engine = Engine(
        store or MemoryStore(),  # type: ignore[arg-type]
        clock=clock,
        policy=POLICY,
        kinds={"safe": KindPolicy(), "unsafe": KindPolicy(retry_safe=False)},
        **kwargs,  # type: ignore[arg-type]
    )
    return engine, clock


def assert_sound(engine: Engine, job_id: str) -> None:
    job = engine.get(job_id)
    assert trail_problems(job, engine.history(job_id), lifecycle(), POLICY) == []


# --- S01 concurrent claim ---------------------------------------------------------------


def test_s01_concurrent_claims_of_one_job_give_it_to_exactly_one_owner() -> None:
    # given one due job and eight workers woken for it at the same instant
    engine, _ = make_engine()
    job = engine.submit("safe", {})
    owners = [Owner(host="h", pid=200 + i, incarnation=f"inc-{i}") for i in range(8)]
    barrier = threading.Barrier(len(owners))
    won: list[Owner] = []

    def claim(owner: Owner) -> None:
        barrier.wait()
        if engine.claim(owner, ids=[job.id]):
            won.append(owner)

    # when they all claim it
    threads = [threading.Thread(target=claim, args=(o,)) for o in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # then exactly one owns it, under fence 1, with one audited lease
    assert len(won) == 1
    leased = engine.get(job.id)
    assert (leased.state, leased.owner, leased.fence) == ("leased", won[0], 1)
    assert [e.event for e in engine.history(job.id)] == ["submit", "lease"]


def test_s01_the_losing_owner_cannot_change_the_job() -> None:
    # given a job A leased, lost to a sweep and B leased again
    engine, clock = make_engine()
    job = engine.submit("safe", {})
    (a_lease,) = engine.claim(A)
    clock.advance(POLICY.lease.ttl + 1)
    sweep(engine)
    (b_lease,) = engine.claim(B)
    # when A reports with its old fence
    with pytest.raises(LeaseLost):
        engine.start(job.id, a_lease.fence)
    # then nothing changed and the rejected report is audited
    assert engine.get(job.id).fence == b_lease.fence == a_lease.fence + 1
    assert engine.get(job.id).state == "leased"
    assert engine.history(job.id)[-1].outcome == "rejected"
    assert_sound(engine, job.id)


# --- S02 killed while running, restarted ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "resumes_in"), [("safe", "retry_wait"), ("unsafe", "investigate")]
)
def test_s02_a_job_whose_worker_died_running_resumes_from_its_last_safe_state(
    kind: str, resumes_in: str
) -> None:
    # given a running job whose worker process is killed
    engine, _ = make_engine()
    job = engine.submit(kind, {})
    (leased,) = engine.claim(A)
    engine.start(job.id, leased.fence)
    # when a sweep finds its liveness token free (the store confirms the death)
    report = sweep(engine, SWEEPER, token_free(A))
    # then a retry-safe job is rerun at once, an unsafe one parked for an operator
    after = engine.get(job.id)
    assert report.expired == 1
    assert (after.state, after.recoveries, after.owner) == (resumes_in, 1, None)
    assert after.last_error is not None
    assert_sound(engine, job.id)


def test_s02_a_leased_job_of_a_dead_worker_goes_back_to_the_queue_and_runs() -> None:
    # given a job leased (not started) by a worker that dies
    engine, _ = make_engine()
    job = engine.submit("unsafe", {})
    engine.claim(A)
    # when the restarted worker sweeps and claims
    sweep(engine, SWEEPER, token_free(A))
    (again,) = engine.claim(B)
    engine.start(job.id, again.fence)
    done = engine.succeed(job.id, again.fence, {"ok": True})
    # then it ran to the end without spending a recovery (it never started under A)
    assert (done.state, done.recoveries, done.attempt) == ("succeeded", 0, 1)
    assert_sound(engine, job.id)


def test_s02_an_alive_owner_is_never_judged_dead() -> None:
    # given a running job whose owner is alive (UNKNOWN counts as alive: fail closed)
    engine, _ = make_engine()
    job = engine.submit("safe", {})
    (leased,) = engine.claim(A)
    engine.start(job.id, leased.fence)
    # when a sweep runs and the store cannot tell (UNKNOWN)
    sweep(engine, SWEEPER, lambda owner: "unknown")
    # then the job stays with its owner
    assert engine.get(job.id).state == "running"


# --- S03 retry policy ------------------------------------------------------------------------


def run_and_fail(engine: Engine, job_id: str, **kwargs: Any) -> Job:
    (leased,) = engine.claim(A, ids=[job_id])
    engine.start(job_id, leased.fence)
    return engine.fail(job_id, leased.fence, "boom", **kwargs)


def test_s03_a_failure_retries_after_a_backoff_within_its_bound() -> None:
    # given a job that fails on its first and second attempts
    engine, clock = make_engine()
    job = engine.submit("safe", {})
    for attempt in (1, 2):
        now = clock.now()
        # when it fails
        failed = run_and_fail(engine, job.id)
        # then it waits, at most the backoff ceiling for this attempt
        assert failed.state == "retry_wait"
        ceiling = POLICY.retry.backoff.ceiling(attempt)
        assert now <= failed.run_after <= now + ceiling
        # and is not leased before it is due
        if failed.run_after > now:
            assert engine.claim(A, ids=[job.id]) == []
        clock.advance(ceiling + 0.001)


def test_s03_retry_after_wins_and_attempts_are_bounded() -> None:
    # given a job with three attempts
    engine, clock = make_engine()
    job = engine.submit("safe", {})
    # when its handler asks to retry after 7 s, then fails twice more
    first = run_and_fail(engine, job.id, delay=7.0)
    assert first.run_after == clock.now() + 7.0
    clock.advance(7.0)
    run_and_fail(engine, job.id)
    clock.advance(60)
    last = run_and_fail(engine, job.id)
    # then the third failure is final: attempts never exceed max_attempts
    assert (last.state, last.attempt, last.max_attempts) == ("failed", 3, 3)
    assert_sound(engine, job.id)


def test_s03_a_permanent_error_or_a_retry_past_the_deadline_fails_at_once() -> None:
    # given a job with a deadline 5 s away and one with plenty of time
    engine, clock = make_engine()
    short = engine.submit("safe", {}, deadline=clock.now() + 5)
    plain = engine.submit("safe", {})
    # when the first asks for a retry after 10 s and the second fails permanently
    late = run_and_fail(engine, short.id, delay=10.0)
    permanent = run_and_fail(engine, plain.id, permanent=True)
    # then neither is retried
    assert late.state == "failed"
    assert permanent.state == "failed"


# --- S04 operator actions ---------------------------------------------------------------------


def test_s04_an_operator_cancel_is_audited_once_and_repeating_it_changes_nothing() -> None:
    # given a queued job
    engine, _ = make_engine()
    job = engine.submit("safe", {})
    # when an operator cancels it twice
    first = engine.cancel(job.id, actor="alice", reason="customer asked")
    second = engine.cancel(job.id, actor="alice", reason="customer asked")
    # then it is cancelled once, with actor and reason on the audit entry
    assert first == second
    entries = [e for e in engine.history(job.id) if e.event == "cancel"]
    assert [(e.actor, e.reason, e.to_state) for e in entries] == [
        ("alice", "customer asked", "cancelled")
    ]


def test_s04_operator_actions_need_actor_and_reason_and_change_nothing_without() -> None:
    # given a job parked in investigate
    engine, _ = make_engine()
    job = engine.submit("unsafe", {})
    (leased,) = engine.claim(A)
    engine.start(job.id, leased.fence)
    engine.ambiguous(job.id, leased.fence, "timeout talking to the bank")
    before = engine.get(job.id)
    # when an operator resolves it without a reason
    with pytest.raises(OperatorError):
        engine.resolve(job.id, outcome="succeeded", actor="bob", reason="")
    # then nothing changed; with a reason it is settled once, and a repeat is a no-op
    assert engine.get(job.id) == before
    done = engine.resolve(job.id, outcome="succeeded", actor="bob", reason="bank confirmed")
    again = engine.resolve(job.id, outcome="succeeded", actor="bob", reason="bank confirmed")
    assert done == again
    assert done.state == "succeeded"
    assert [e.actor for e in engine.history(job.id) if e.event == "resolve"] == ["bob"]
    assert_sound(engine, job.id)


def test_s04_requeue_of_a_finished_job_is_explicit_and_audited() -> None:
    # given a failed job
    engine, _ = make_engine()
    job = engine.submit("safe", {})
    run_and_fail(engine, job.id, permanent=True)
    # when an operator requeues it with a fresh budget of two attempts
    with pytest.raises(OperatorError):
        engine.requeue(job.id, actor="carol", reason="fixed the bug", attempts=0)
    requeued = engine.requeue(job.id, actor="carol", reason="fixed the bug", attempts=2)
    # then it is queued again with that budget, and the only way out of failed is audited
    assert (requeued.state, requeued.max_attempts) == ("queued", requeued.attempt + 2)
    entry = engine.history(job.id)[-1]
    assert (entry.event, entry.from_state, entry.actor) == ("requeue", "failed", "carol")
    with pytest.raises(IllegalTransition):
        engine.resolve(job.id, outcome="failed", actor="carol", reason="not parked")
    assert_sound(engine, job.id)


# --- S05 correlation ---------------------------------------------------------------------------


def test_s05_one_correlation_id_links_submit_attempts_errors_and_operator_actions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a job submitted under a request's correlation id
    engine, clock = make_engine()
    caplog.set_level(logging.INFO, logger="fsm.transitions")
    job = engine.submit("safe", {}, correlation_id="req-42")
    # when it fails, retries, is reported late by a lost owner, fails for good and is requeued
    run_and_fail(engine, job.id, delay=1.0)
    clock.advance(1.0)
    (leased,) = engine.claim(A)
    with pytest.raises(LeaseLost):
        engine.start(job.id, leased.fence - 1)
    engine.start(job.id, leased.fence)
    engine.fail(job.id, leased.fence, "boom", permanent=True)
    engine.requeue(job.id, actor="dave", reason="retry by hand", attempts=1)
    # then every audit entry and every transition log record carries it
    history = engine.history(job.id)
    assert {e.event for e in history} >= {"submit", "lease", "start", "fail", "requeue"}
    assert {e.correlation_id for e in history} == {"req-42"}
    assert any(e.outcome == "rejected" and e.correlation_id == "req-42" for e in history)
    logged = [getattr(r, "jobfsm") for r in caplog.records if hasattr(r, "jobfsm")]  # noqa: B009
    assert logged
    assert {x["correlation_id"] for x in logged} == {"req-42"}


# --- S06 metrics -------------------------------------------------------------------------------


def test_s06_transitions_are_counted_and_stuck_jobs_are_observable() -> None:
    # given an engine with counting metrics, one job done and one stuck with a lapsed lease
    metrics = CountingMetrics()
    engine, clock = make_engine(metrics=metrics)
    done = engine.submit("safe", {})
    stuck = engine.submit("safe", {})
    (leased,) = engine.claim(A, ids=[done.id])
    engine.start(done.id, leased.fence)
    engine.succeed(done.id, leased.fence)
    engine.claim(B, ids=[stuck.id])
    clock.advance(POLICY.lease.ttl + 1)
    # when the metrics, counts and the expired-lease scan are read
    lapsed = engine.scan(ScanRequest(states=("leased", "running"), lease_expired_at=clock.now()))
    # then every transition was counted, states are gauged and the stuck job is found
    assert metrics.transitions[("safe", "submit", None, "queued")] == 2
    assert metrics.transitions[("safe", "start", "leased", "running")] == 1
    assert metrics.transitions[("safe", "succeed", "running", "succeeded")] == 1
    assert engine.counts() == {("default", "succeeded"): 1, ("default", "leased"): 1}
    assert [j.id for j in lapsed] == [stuck.id]


# --- S07 recovery under fault injection ---------------------------------------------------------


def test_s07_a_report_whose_commit_is_unacknowledged_is_not_applied_twice() -> None:
    # given a running job and a store that loses the reply of the next write
    store = FaultyStore(MemoryStore())
    engine, _ = make_engine(store)
    job = engine.submit("safe", {})
    (leased,) = engine.claim(A)
    engine.start(job.id, leased.fence)
    store.arm("apply", "after")
    # when the worker reports success, gets an error, re-reads and reports again
    with pytest.raises(TransientStoreError):
        engine.succeed(job.id, leased.fence, {"n": 1})
    seen = engine.get(job.id)
    with pytest.raises(IllegalTransition):
        engine.succeed(job.id, leased.fence, {"n": 1})
    # then the first report had committed, and exactly one succeed is in the trail
    assert seen.state == "succeeded"
    assert [e.event for e in engine.history(job.id)].count("succeed") == 1
    assert_sound(engine, job.id)


def test_s07_recovery_sweeps_under_store_errors_converge_and_recover_once() -> None:
    # given a running job of a dead worker and a store failing before and after commits
    store = FaultyStore(MemoryStore())
    engine, _ = make_engine(store)
    job = engine.submit("safe", {})
    (leased,) = engine.claim(A)
    engine.start(job.id, leased.fence)
    # when sweeps run: one fails before its commit, one loses its reply, one is clean
    for when in ("before", "after"):
        store.arm("apply", when)
        with pytest.raises(TransientStoreError):
            sweep(engine, SWEEPER, token_free(A))
    sweep(engine, SWEEPER, token_free(A))
    # then the job was recovered exactly once
    after = engine.get(job.id)
    assert (after.state, after.recoveries) == ("retry_wait", 1)
    assert [e.event for e in engine.history(job.id)].count("expire") == 1
    assert store.fired == {
        "store error before commit (apply)": 1,
        "store error after commit (apply)": 1,
    }
    assert_sound(engine, job.id)


def test_s03_a_waiting_job_past_its_deadline_is_failed_by_the_recovery_sweep() -> None:
    # given a queued job whose deadline passes before any worker takes it
    engine, clock = make_engine()
    job = engine.submit("safe", {}, deadline=clock.now() + 5)
    clock.advance(6)
    # when a recovery sweep runs
    report = sweep(engine)
    # then the job is failed for its deadline (it can never be leased any more)
    assert report.deadlines == 1
    assert engine.get(job.id).state == "failed"


@pytest.mark.parametrize("when", ["before", "after"])
def test_s07_a_faulted_prune_batch_that_counts_deleted_what_its_commit_says(when: str) -> None:
    # given two finished jobs of one queue behind a store that fails the next prune
    store = FaultyStore(MemoryStore())
    engine, clock = make_engine(store)
    for _ in range(2):
        job = engine.submit("safe", {})
        (leased,) = engine.claim(A)
        engine.start(job.id, leased.fence)
        engine.succeed(job.id, leased.fence, None)
    clock.advance(10)
    request = PruneRequest(cutoffs={"succeeded": clock.now()}, limit=10)
    store.arm("prune", when)
    # when retention's counting prune meets the fault, then runs again clean
    with pytest.raises(TransientStoreError):
        store.prune_counts(request)
    again = store.prune_counts(request)
    # then a fault before the commit deleted nothing (the clean batch deletes both); a
    # lost reply deleted both (the clean batch finds none): never a job counted twice
    assert again == ({("default", "succeeded"): 2} if when == "before" else {})
    assert engine.counts() == {}
    assert store.fired == {f"store error {when} commit (prune)": 1}
