"""Run marks, the expire guard for runs lost before any outside call, reconcilers and
reason codes: the engine over the memory store on fake time, the production sweep."""

from __future__ import annotations

import json
import time
from typing import Any

import attrs
import pytest

from adapters.memory import MemoryStore
from fsm import BadInput, Engine, FakeClock, KindPolicy, LeaseLost, Owner, Policy
from fsm.lifecycle.invariants import trail_problems
from fsm.lifecycle.outside import MAX_MARKS
from fsm.lifecycle.spec import lifecycle
from fsm.records import Job
from fsm.service.maintenance import sweep
from fsm.service.reconcile import LostRun, Reconciler, done, not_started, still_running, unknown

from .helpers import sweeper_on

A = Owner(host="host-a", pid=101, incarnation="inc-a")
POLICY = Policy.seeded(7)
SWEEPER = sweeper_on("sweeper-host")


def engine_with_clock() -> tuple[Engine, FakeClock]:
    clock = FakeClock()
    kinds = {
        "pay": KindPolicy(retry_safe=False, marks_outside_calls=True),
        "pay0": KindPolicy(retry_safe=False, marks_outside_calls=True, max_recoveries=0),
    }
    return Engine(MemoryStore(), clock=clock, policy=POLICY, kinds=kinds), clock


def running(engine: Engine, *, marks_declared: bool = True, **opts: Any) -> Job:
    job = engine.submit("pay", {"amount": 5}, **opts)
    (leased,) = engine.claim(A, ids=[job.id])
    policy = {"retry_safe": False, "marks_outside_calls": marks_declared}
    return engine.transition(job.id, "start", fence=leased.fence, kind_policy=policy)


def sound(engine: Engine, job_id: str) -> None:
    job = engine.get(job_id)
    assert trail_problems(job, engine.history(job_id), lifecycle(), POLICY) == []


# --- reason codes ------------------------------------------------------------------


def test_every_audit_entry_carries_a_declared_reason_code() -> None:
    engine, _clock = engine_with_clock()
    job = running(engine)
    engine.succeed(job.id, job.fence, {"ok": True})

    codes = [e.code for e in engine.history(job.id)]

    assert codes == ["submitted", "leased", "started", "handler_returned"]
    assert all(c in lifecycle().codes for c in codes)


def test_a_failure_code_says_which_bound_stopped_the_retry() -> None:
    engine, _ = engine_with_clock()
    job = running(engine, max_attempts=1)

    engine.fail(job.id, job.fence, "boom")

    assert engine.history(job.id)[-1].code == "attempts_exhausted"


def test_a_rejected_stale_report_is_coded_stale_fence() -> None:
    engine, _ = engine_with_clock()
    job = running(engine)

    with pytest.raises(LeaseLost):
        engine.succeed(job.id, job.fence - 1, None)

    entry = engine.history(job.id)[-1]
    assert (entry.outcome, entry.code) == ("rejected", "stale_fence")


def test_an_owner_confirmed_dead_is_coded_by_the_verdict_and_a_lapse_as_lease_lapsed() -> None:
    engine, clock = engine_with_clock()
    job = running(engine)
    sweeper = sweeper_on("host-a", gone=(A.pid,))

    sweep(engine, sweeper)

    entry = engine.history(job.id)[-1]
    assert (entry.event, entry.code) == ("expire", "owner_dead_pid_gone")
    other = running(engine)
    clock.advance(POLICY.lease.ttl + 1)
    sweep(engine)
    assert engine.history(other.id)[-1].code == "lease_lapsed"


def test_a_recovery_entry_that_does_not_name_the_lost_owner_breaks_i8() -> None:
    # given a run lost by owner A and recovered by the sweep
    engine, clock = engine_with_clock()
    job = running(engine)
    clock.advance(POLICY.lease.ttl + 1)
    sweep(engine)
    history = engine.history(job.id)
    assert history[-1].event == "expire"
    assert history[-1].lost_owner == A
    sound(engine, job.id)
    # when the trail's recovery entry is read without the owner it names
    data = {k: v for k, v in history[-1].data.items() if k != "lost_owner"}
    stripped = [*history[:-1], attrs.evolve(history[-1], data_json=json.dumps(data))]
    # then the trail breaks I8, naming the entry
    problems = trail_problems(engine.get(job.id), stripped, lifecycle(), POLICY)
    assert problems == [
        f"I8 job {job.id}: entry {len(history) - 1} (expire running->{history[-1].to_state} "
        f"v{history[-1].version}): a recovery's entry must name the owner that lost the run"
    ]


# --- marks -------------------------------------------------------------------------


def test_a_mark_is_stored_fenced_in_the_current_attempt_without_changing_the_state() -> None:
    engine, _ = engine_with_clock()
    job = running(engine)

    after = engine.mark(job.id, job.fence, "calling payment provider", "ch_123")

    entry = engine.history(job.id)[-1]
    assert after.state == "running"
    assert after.marks == 1
    assert (entry.event, entry.code, entry.attempt) == ("mark", "mark", job.attempt)
    assert entry.data["label"] == "calling payment provider"
    assert entry.data["external_id"] == "ch_123"
    sound(engine, job.id)


def test_a_mark_with_a_stale_fence_raises_lease_lost_and_stores_nothing() -> None:
    engine, _ = engine_with_clock()
    job = running(engine)

    with pytest.raises(LeaseLost):
        engine.mark(job.id, job.fence - 1, "calling")

    assert engine.get(job.id).marks == 0


def test_marks_past_the_bound_are_refused_and_nothing_is_stored() -> None:
    engine, _ = engine_with_clock()
    job = running(engine)
    for i in range(MAX_MARKS):
        engine.mark(job.id, job.fence, f"step {i}")
    before = engine.history(job.id)

    with pytest.raises(BadInput, match="marks"):
        engine.mark(job.id, job.fence, "one too many")
    with pytest.raises(BadInput, match="label"):
        engine.mark(job.id, job.fence, "x" * 201)

    assert engine.history(job.id) == before
    assert engine.get(job.id).marks == MAX_MARKS


# --- the expire guard --------------------------------------------------------------


def test_a_not_retry_safe_run_lost_before_any_mark_is_run_again() -> None:
    engine, clock = engine_with_clock()
    job = running(engine)
    clock.advance(POLICY.lease.ttl + 1)

    sweep(engine)

    assert engine.get(job.id).state == "retry_wait"
    sound(engine, job.id)


def test_a_not_retry_safe_run_lost_after_a_mark_is_investigated() -> None:
    engine, clock = engine_with_clock()
    job = running(engine)
    engine.mark(job.id, job.fence, "calling")
    clock.advance(POLICY.lease.ttl + 1)

    sweep(engine)

    assert engine.get(job.id).state == "investigate"
    assert engine.history(job.id)[-1].code == "not_retry_safe"


def test_a_handler_that_does_not_declare_its_marks_is_never_rerun_unsafely() -> None:
    engine, clock = engine_with_clock()
    job = running(engine, marks_declared=False)
    clock.advance(POLICY.lease.ttl + 1)

    sweep(engine)

    assert engine.get(job.id).marks is None
    assert engine.get(job.id).state == "investigate"


def test_marks_are_reset_when_the_next_attempt_starts() -> None:
    engine, clock = engine_with_clock()
    job = running(engine)
    engine.mark(job.id, job.fence, "calling")
    engine.fail(job.id, job.fence, "boom")
    clock.advance(3600)

    (leased,) = engine.claim(A, ids=[job.id])
    policy = {"retry_safe": False, "marks_outside_calls": True}
    again = engine.transition(job.id, "start", fence=leased.fence, kind_policy=policy)

    assert again.marks == 0
    sound(engine, job.id)


# --- reconcilers -------------------------------------------------------------------


def marked_and_lost(engine: Engine, clock: FakeClock) -> Job:
    job = running(engine)
    engine.mark(job.id, job.fence, "charging", "ch_1")
    clock.advance(POLICY.lease.ttl + 1)
    return job


def reconcile_with(answer: Any, **opts: Any) -> dict[str, Reconciler]:
    def fn(run: LostRun) -> Any:
        if isinstance(answer, BaseException):
            raise answer
        return answer(run) if callable(answer) else answer

    return {"pay": Reconciler(fn, **opts)}


@pytest.mark.parametrize(
    ("answer", "state", "code"),
    [
        (done({"charge": "ch_1"}), "succeeded", "reconciled_done"),
        (not_started(), "retry_wait", "reconciled_not_started"),
        (unknown("provider down"), "investigate", "reconciled_unknown"),
        (RuntimeError("boom"), "investigate", "reconciler_failed"),
        ("not an answer", "investigate", "reconciler_failed"),
    ],
)
def test_a_reconciler_answer_moves_the_lost_run_to_the_documented_state(
    answer: Any, state: str, code: str
) -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)

    sweep(engine, SWEEPER, reconcilers=reconcile_with(answer))

    after = engine.get(job.id)
    trail = engine.history(job.id)
    assert after.state == state
    assert [e.to_state for e in trail[-2:]] == ["reconciling", state]
    assert trail[-1].code == code
    assert trail[-1].event == "reconcile"
    assert trail[-2].fence == job.fence + 1  # the claim took a fence of its own
    sound(engine, job.id)


def test_a_done_answer_stores_the_result() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)

    sweep(engine, SWEEPER, reconcilers=reconcile_with(done({"charge": "ch_1"})))

    assert engine.get(job.id).result == {"charge": "ch_1"}


def test_the_reconciler_is_given_the_lost_attempt_and_its_marks() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    seen: list[LostRun] = []

    def fn(run: LostRun) -> Any:
        seen.append(run)
        return unknown()

    sweep(engine, SWEEPER, reconcilers={"pay": Reconciler(fn)})

    (run,) = seen
    assert run.job.id == job.id
    assert run.attempt == job.attempt
    assert [(m.label, m.external_id) for m in run.marks] == [("charging", "ch_1")]


def test_a_hung_reconciler_counts_as_unknown_after_its_timeout() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)

    def fn(run: LostRun) -> Any:
        time.sleep(2)
        return done()

    began = time.monotonic()
    sweep(engine, SWEEPER, reconcilers={"pay": Reconciler(fn, timeout=0.2)})

    assert time.monotonic() - began < 1.5
    assert engine.get(job.id).state == "investigate"
    assert "hung" in (engine.history(job.id)[-1].error or "")


def test_an_async_reconciler_is_awaited() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)

    async def fn(run: LostRun) -> Any:
        return done(7)

    sweep(engine, SWEEPER, reconcilers={"pay": Reconciler(fn)})

    assert engine.get(job.id).result == 7


def test_still_running_waits_and_is_checked_again_within_the_recovery_budget() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    answers = iter([still_running(until=clock.now() + 10), done("late")])

    def fn(run: LostRun) -> Any:
        return next(answers)

    recs = {"pay": Reconciler(fn)}
    sweep(engine, SWEEPER, reconcilers=recs)
    waiting = engine.get(job.id)
    assert waiting.state == "reconciling"
    assert waiting.owner is None
    sweep(engine, SWEEPER, reconcilers=recs)  # not due yet: nothing asked
    assert engine.get(job.id).version == waiting.version

    clock.advance(11)
    sweep(engine, SWEEPER, reconcilers=recs)

    assert engine.get(job.id).state == "succeeded"
    codes = [e.code for e in engine.history(job.id)[-4:]]
    assert codes == ["lease_lapsed", "reconciled_still_running", "recheck", "reconciled_done"]
    sound(engine, job.id)


def test_still_running_forever_ends_in_investigate_within_the_recovery_budget() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    recs = reconcile_with(lambda run: still_running(until=clock.now() + 1))

    for _ in range(POLICY.recovery.max_recoveries + 2):
        sweep(engine, SWEEPER, reconcilers=recs)
        clock.advance(2)

    after = engine.get(job.id)
    assert after.state == "investigate"
    assert engine.history(job.id)[-1].code == "recoveries_exhausted"
    assert after.recoveries <= after.max_recoveries
    sound(engine, job.id)


def test_a_claim_whose_sweeper_died_is_investigated_never_asked_twice_at_once() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    # a sweeper claimed the reconcile and died before it asked
    claimed = engine.expire_seen(
        engine.get(job.id), reconciler=True, owner=A, lease_until=clock.now() + 5
    )
    assert claimed is not None
    assert claimed.state == "reconciling"
    asked: list[str] = []

    def fn(run: LostRun) -> Any:
        asked.append(run.job.id)
        return done()

    recs = {"pay": Reconciler(fn)}

    sweep(engine, SWEEPER, reconcilers=recs)  # the claim is still live: left alone
    assert asked == []
    assert engine.get(job.id).state == "reconciling"
    clock.advance(6)
    sweep(engine, SWEEPER, reconcilers=recs)

    assert asked == []
    assert engine.get(job.id).state == "investigate"
    assert engine.history(job.id)[-1].code == "reconciler_lost"
    sound(engine, job.id)


def test_a_late_answer_from_a_superseded_claim_is_rejected() -> None:
    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    claimed = engine.expire_seen(
        engine.get(job.id), reconciler=True, owner=A, lease_until=clock.now() + 5
    )
    assert claimed is not None

    with pytest.raises(LeaseLost):
        engine.reconcile(job.id, claimed.fence - 1, "done", result=1)

    assert engine.get(job.id).state == "reconciling"


def spent_and_lost(engine: Engine, clock: FakeClock) -> Job:
    """A marked run of a kind with no recovery budget at all, lost."""
    job = engine.submit("pay0", {})
    (leased,) = engine.claim(A, ids=[job.id])
    job = engine.start(job.id, leased.fence)
    engine.mark(job.id, job.fence, "charging")
    clock.advance(POLICY.lease.ttl + 1)
    return job


def test_over_the_budget_a_final_check_asks_once_before_investigate() -> None:
    engine, clock = engine_with_clock()
    job = spent_and_lost(engine, clock)
    recs = {"pay0": Reconciler(lambda run: done("ok"), final_check=True)}

    sweep(engine, SWEEPER, reconcilers=recs)

    trail = engine.history(job.id)
    assert engine.get(job.id).state == "succeeded"
    assert [e.code for e in trail[-2:]] == ["final_check", "reconciled_done"]
    sound(engine, job.id)


def test_a_final_check_that_is_not_done_ends_in_investigate() -> None:
    engine, clock = engine_with_clock()
    job = spent_and_lost(engine, clock)
    recs = {"pay0": Reconciler(lambda run: not_started(), final_check=True)}

    sweep(engine, SWEEPER, reconcilers=recs)

    assert engine.get(job.id).state == "investigate"
    assert engine.history(job.id)[-1].code == "recoveries_exhausted"
    sound(engine, job.id)


def test_without_a_final_check_a_run_over_its_budget_is_investigated_unasked() -> None:
    engine, clock = engine_with_clock()
    job = spent_and_lost(engine, clock)
    asked: list[str] = []

    def fn(run: LostRun) -> Any:
        asked.append(run.job.id)
        return done()

    sweep(engine, SWEEPER, reconcilers={"pay0": Reconciler(fn)})

    assert asked == []
    assert engine.get(job.id).state == "investigate"
    assert engine.history(job.id)[-1].code == "recoveries_exhausted"


def test_a_job_paths_diagram_names_its_marks_by_step() -> None:
    from fsm.display.diagram import path_marks, path_steps, render_mermaid

    engine, _ = engine_with_clock()
    job = running(engine)
    engine.mark(job.id, job.fence, "charging", "ch_1")
    engine.mark(job.id, job.fence, "emailing")
    trail = engine.history(job.id)

    title = path_marks(trail)
    text = render_mermaid(lifecycle(), path=path_steps(trail), title=title)

    assert title == 'step 4 "charging" [ch_1]; step 5 "emailing"'
    assert "running --> running : mark (step 4, 5)" in text
    assert title in text


def test_a_sweep_without_the_kinds_reconciler_leaves_the_lost_run_to_one_that_has_it() -> None:

    engine, clock = engine_with_clock()
    job = engine.submit("pay", {"amount": 5})
    (leased,) = engine.claim(A, ids=[job.id])
    policy = {"retry_safe": False, "marks_outside_calls": True, "reconciler": True}
    job = engine.transition(job.id, "start", fence=leased.fence, kind_policy=policy)
    engine.mark(job.id, job.fence, "charging", "ch_1")
    assert engine.get(job.id).reconciler is True
    clock.advance(POLICY.lease.ttl + 1)

    # a worker serving other kinds (or `jobfsm recover`) sweeps: it leaves the run alone
    sweep(engine, SWEEPER, reconcilers={})
    sweep(engine)
    assert engine.get(job.id).state == "running"
    # a worker with the reconciler asks it
    sweep(engine, SWEEPER, reconcilers=reconcile_with(done("paid")))
    assert engine.get(job.id).state == "succeeded"


def test_without_any_worker_that_has_the_reconciler_the_run_is_parked_after_the_grace() -> None:
    from fsm.service.maintenance.rescue import RECONCILE_DEFER

    engine, clock = engine_with_clock()
    job = engine.submit("pay", {"amount": 5})
    (leased,) = engine.claim(A, ids=[job.id])
    policy = {"retry_safe": False, "marks_outside_calls": True, "reconciler": True}
    job = engine.transition(job.id, "start", fence=leased.fence, kind_policy=policy)
    engine.mark(job.id, job.fence, "charging", "ch_1")
    clock.advance(POLICY.lease.ttl + RECONCILE_DEFER + 1)

    sweep(engine)

    assert engine.get(job.id).state == "investigate"
    assert engine.history(job.id)[-1].code == "not_retry_safe"
    sound(engine, job.id)


def test_with_an_asker_the_sweep_does_not_wait_and_its_own_judge_keeps_the_claim() -> None:
    import threading

    from fsm.service.reconcile import Asker

    engine, clock = engine_with_clock()
    job = marked_and_lost(engine, clock)
    release = threading.Event()

    def fn(run: LostRun) -> Any:
        release.wait(10)
        return done("late but true")

    asker = Asker()
    recs = {"pay": Reconciler(fn)}
    began = time.monotonic()
    sweep(engine, SWEEPER, reconcilers=recs, asker=asker)
    # the sweep came back at once, the claim in place; another sweep of the same
    # process (which judges its own runs) leaves the claim alone while it is asked
    assert time.monotonic() - began < 2
    assert engine.get(job.id).state == "reconciling"
    sweep(engine, SWEEPER, reconcilers=recs, asker=asker)
    assert engine.get(job.id).state == "reconciling"

    release.set()
    assert asker.wait_idle(10)

    assert engine.get(job.id).state == "succeeded"
    assert engine.get(job.id).result == "late but true"
    sound(engine, job.id)
