"""The Engine over the memory store: submit, reports, operators, recovery, bad input."""

from __future__ import annotations

import threading

import pytest

from adapters.memory import MemoryStore
from fsm import (
    BadInput,
    CountingMetrics,
    Engine,
    FakeClock,
    IllegalTransition,
    JobNotFound,
    KindPolicy,
    LeaseLost,
    LeasePolicy,
    Limits,
    OperatorError,
    PayloadError,
    Policy,
    QueueFull,
    UnknownKind,
)
from fsm.lifecycle.core import replay, same_except_heartbeats
from fsm.service.maintenance import sweep

from .helpers import OTHER, OWNER, sweeper_on


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def engine(clock: FakeClock) -> Engine:
    # "email" is declared retry-safe; a kind the engine does not know is stored fail-closed
    return Engine(
        MemoryStore(),
        clock=clock,
        policy=Policy.seeded(1),
        metrics=CountingMetrics(),
        kinds={"email": KindPolicy()},
    )


def run_to_running(engine: Engine, kind: str = "email", **opts: object) -> str:
    job = engine.submit(kind, {"n": 1}, **opts)
    (leased,) = engine.claim(OWNER, limit=1)
    assert leased.id == job.id
    engine.start(job.id, leased.fence)
    return job.id


def test_a_full_lifecycle_is_audited_step_by_step(engine: Engine) -> None:
    job_id = run_to_running(engine)
    engine.succeed(job_id, 1, result={"sent": True})
    job = engine.get(job_id)
    assert job.state == "succeeded"
    assert job.result == {"sent": True}
    events = [(e.event, e.from_state, e.to_state) for e in engine.history(job_id)]
    assert events == [
        ("submit", None, "queued"),
        ("lease", "queued", "leased"),
        ("start", "leased", "running"),
        ("succeed", "running", "succeeded"),
    ]
    rebuilt = replay(engine.history(job_id))
    assert rebuilt is not None
    assert same_except_heartbeats(rebuilt, job)


def test_a_second_submit_with_the_same_idempotency_key_returns_the_first_job(
    engine: Engine,
) -> None:
    first = engine.submit("email", {"to": "a"}, idempotency_key="welcome-a")
    second = engine.submit("email", {"to": "b"}, idempotency_key="welcome-a")
    assert second.id == first.id
    assert second.payload == {"to": "a"}
    assert sum(engine.counts().values()) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\tinside", 42])
def test_a_bad_idempotency_key_is_refused(engine: Engine, key: object) -> None:
    with pytest.raises(BadInput, match="idempotency key"):
        engine.submit("email", {}, idempotency_key=key)
    assert engine.counts() == {}


def test_an_email_address_is_a_valid_idempotency_key(engine: Engine) -> None:
    job = engine.submit("email", {}, idempotency_key="welcome:ada@example.com")
    assert job.idempotency_key == "welcome:ada@example.com"


def test_concurrent_submits_of_one_key_make_one_job(engine: Engine) -> None:
    ids: list[str] = []
    barrier = threading.Barrier(8)

    def submit() -> None:
        barrier.wait()
        ids.append(engine.submit("email", {}, idempotency_key="once").id)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    assert sum(engine.counts().values()) == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"when": object()}, "not JSON-serializable"),
        ({"x": float("nan")}, "not JSON-serializable"),
        ("x" * (1024 * 1024 + 1), "over the limit"),
    ],
)
def test_a_bad_payload_is_refused_and_nothing_is_stored(
    engine: Engine, payload: object, message: str
) -> None:
    with pytest.raises(PayloadError, match=message):
        engine.submit("email", payload)
    assert engine.counts() == {}


def test_the_payload_limit_is_configurable(clock: FakeClock) -> None:
    small = Engine(MemoryStore(), clock=clock, policy=Policy(limits=Limits(max_payload_bytes=10)))
    with pytest.raises(PayloadError, match="over the limit of 10 bytes"):
        small.submit("email", "0123456789")


@pytest.mark.parametrize(
    ("kind", "opts", "message"),
    [
        ("", {}, "kind"),
        ("bad kind!", {}, "kind"),
        ("email", {"queue": "a b"}, "queue"),
        ("email", {"max_attempts": 0}, "max_attempts"),
        ("email", {"priority": "high"}, "priority"),
        ("email", {"timeout": -1}, "timeout"),
        ("email", {"colour": "red"}, "unknown options"),
    ],
)
def test_bad_submit_options_are_named_and_nothing_is_stored(
    engine: Engine, kind: str, opts: dict[str, object], message: str
) -> None:
    with pytest.raises(BadInput, match=message):
        engine.submit(kind, {}, **opts)
    assert engine.counts() == {}


def test_an_unknown_kind_is_refused_when_kinds_are_strict(clock: FakeClock) -> None:
    strict = Engine(MemoryStore(), clock=clock, kinds={"email": KindPolicy()}, strict_kinds=True)
    with pytest.raises(UnknownKind, match=r"'sms'.*known kinds: email"):
        strict.submit("sms", {})
    assert strict.counts() == {}


def test_kind_defaults_apply_at_submit(clock: FakeClock) -> None:
    engine = Engine(MemoryStore(), clock=clock)
    engine.register_kind("charge", KindPolicy(queue="payments", retry_safe=False, max_attempts=2))
    job = engine.submit("charge", {})
    assert (job.queue, job.retry_safe, job.max_attempts) == ("payments", False, 2)


def test_an_unknown_job_id_is_a_clear_error(engine: Engine) -> None:
    with pytest.raises(JobNotFound, match="no job with id 'nope'"):
        engine.get("nope")
    with pytest.raises(JobNotFound):
        engine.cancel("nope", actor="ops", reason="x")


def test_a_stale_report_is_rejected_recorded_and_changes_nothing(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = run_to_running(engine)
    clock.advance(31)
    sweep(engine)  # lease lapsed: back to retry_wait, fence stays 1
    clock.advance(1)
    (again,) = engine.claim(OTHER)
    assert again.fence == 2
    before = engine.get(job_id)
    with pytest.raises(LeaseLost):
        engine.succeed(job_id, 1, result="late")
    after = engine.get(job_id)
    assert after == before
    last = engine.history(job_id)[-1]
    assert (last.outcome, last.event, last.fence) == ("rejected", "succeed", 1)


def test_a_result_that_is_not_json_is_refused_before_any_write(engine: Engine) -> None:
    job_id = run_to_running(engine)
    before = engine.get(job_id)
    with pytest.raises(PayloadError, match="result of job"):
        engine.succeed(job_id, 1, result={1, 2})
    assert engine.get(job_id) == before


def test_operator_actions_need_actor_and_reason_and_are_idempotent(engine: Engine) -> None:
    job = engine.submit("email", {})
    with pytest.raises(OperatorError, match="actor"):
        engine.requeue(job.id, actor="", reason="x", attempts=1)
    first = engine.cancel(job.id, actor="ada", reason="dup")
    again = engine.cancel(job.id, actor="ada", reason="dup")
    assert first.state == again.state == "cancelled"
    assert again.version == first.version  # the repeat wrote nothing
    entry = engine.history(job.id)[-1]
    assert (entry.actor, entry.reason) == ("ada", "dup")


def test_resolve_of_a_job_not_in_investigate_names_state_and_event(engine: Engine) -> None:
    job = engine.submit("email", {})
    with pytest.raises(IllegalTransition, match="'resolve' is not allowed in state 'queued'"):
        engine.resolve(job.id, outcome="succeeded", actor="ops", reason="x")


def test_resolving_twice_with_the_same_outcome_is_a_no_op(engine: Engine) -> None:
    job_id = run_to_running(engine, retry_safe=False)
    engine.ambiguous(job_id, 1, "charge unknown")
    first = engine.resolve(job_id, outcome="failed", actor="ops", reason="not charged")
    second = engine.resolve(job_id, outcome="failed", actor="ops", reason="not charged")
    assert first.version == second.version
    with pytest.raises(IllegalTransition):
        engine.resolve(job_id, outcome="succeeded", actor="ops", reason="changed my mind")


def test_a_full_queue_refuses_new_jobs(clock: FakeClock) -> None:
    engine = Engine(
        MemoryStore(), clock=clock, policy=Policy(limits=Limits(queue_capacity={"default": 2}))
    )
    engine.submit("email", {})
    engine.submit("email", {})
    with pytest.raises(QueueFull, match="'default' is full"):
        engine.submit("email", {})
    assert sum(engine.counts().values()) == 2


def test_claim_orders_by_priority_then_run_after_then_id(engine: Engine, clock: FakeClock) -> None:
    low = engine.submit("email", {}, priority=5)
    late = engine.submit("email", {}, priority=0, delay=1)
    first = engine.submit("email", {}, priority=0)
    engine.submit("email", {}, delay=3600)  # not due
    clock.advance(2)
    leased = engine.claim(OWNER, limit=10)
    assert [j.id for j in leased] == [first.id, late.id, low.id]


def test_recover_expires_lapsed_leases_and_fails_passed_deadlines(
    engine: Engine, clock: FakeClock
) -> None:
    safe = run_to_running(engine)
    unsafe = run_to_running(engine, retry_safe=False)
    timed = engine.submit("email", {}, deadline=clock.now() + 5)
    clock.advance(31)
    report = sweep(engine)
    assert engine.get(safe).state == "retry_wait"
    assert engine.get(unsafe).state == "investigate"
    assert engine.get(timed.id).state == "failed"
    assert (report.expired, report.to_investigate, report.deadlines) == (2, 1, 1)


def test_recover_with_a_judge_takes_jobs_of_confirmed_dead_owners_at_once(
    engine: Engine,
) -> None:
    job_id = run_to_running(engine)
    report = sweep(engine, sweeper_on(OWNER.host, gone=(OWNER.pid,)))
    job = engine.get(job_id)
    assert report.expired == 1
    assert job.state == "retry_wait"
    assert job.last_error is not None
    assert "pid 4242 is gone on this host" in job.last_error


def test_a_death_verdict_never_expires_the_lease_of_a_newer_owner(engine: Engine) -> None:
    # Given a job whose owner is judged while, in between, another sweeper has
    # already recovered it and a new owner has leased it.
    job_id = run_to_running(engine)

    def slow_probe(owner: object) -> str:
        engine.expire(job_id, verdict="dead", reason="first sweeper")
        engine.claim(OTHER)
        return "dead"

    # When the slow sweep acts on its verdict about the old owner
    report = sweep(engine, sweeper_on("sweeper-host"), slow_probe)
    # Then the new owner's lease is untouched.
    job = engine.get(job_id)
    assert (job.state, job.owner, job.fence) == ("leased", OTHER, 2)
    assert report.expired == 0


def test_recover_leaves_live_and_unknown_owners_alone(engine: Engine) -> None:
    job_id = run_to_running(engine)
    sweep(engine, sweeper_on("sweeper-host"), lambda owner: "unknown")
    assert engine.get(job_id).state == "running"


def test_heartbeat_renews_only_leases_whose_fence_and_owner_match(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = run_to_running(engine)
    clock.advance(10)
    assert engine.heartbeat(OWNER, {job_id: 1}) == {job_id: "running"}
    assert engine.get(job_id).lease_until == clock.now() + 30
    assert engine.heartbeat(OWNER, {job_id: 0}) == {}
    assert engine.heartbeat(OTHER, {job_id: 1}) == {}


def test_a_cancel_request_reaches_the_worker_through_its_heartbeat(engine: Engine) -> None:
    job_id = run_to_running(engine)
    engine.cancel(job_id, actor="ops", reason="stop")
    assert engine.heartbeat(OWNER, {job_id: 1}) == {job_id: "cancelling"}
    engine.cancelled_ack(job_id, 1, result={"done": 3})
    assert engine.get(job_id).state == "cancelled"


def test_prune_deletes_only_finished_jobs_past_retention(engine: Engine, clock: FakeClock) -> None:
    done = run_to_running(engine)
    engine.succeed(done, 1)
    failed = run_to_running(engine)
    engine.fail(failed, 1, "bad", permanent=True)
    waiting = engine.submit("email", {})
    clock.advance(7 * 86400 + 1)
    assert engine.prune() == 1
    with pytest.raises(JobNotFound):
        engine.get(done)
    assert engine.get(failed).state == "failed"  # kept until handled
    assert engine.get(waiting.id).state == "queued"


def test_lease_policy_rejects_a_ttl_shorter_than_two_heartbeats() -> None:
    with pytest.raises(ValueError, match="at least twice"):
        LeasePolicy(ttl=5, heartbeat_interval=3)


def test_metrics_count_transitions(engine: Engine) -> None:
    job_id = run_to_running(engine)
    engine.succeed(job_id, 1)
    metrics = engine.metrics
    assert isinstance(metrics, CountingMetrics)
    assert metrics.transitions[("email", "succeed", "running", "succeeded")] == 1


def test_a_transition_log_line_carries_the_kind_and_the_errors_first_line(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = run_to_running(engine)
    fence = engine.get(job_id).fence
    with caplog.at_level("INFO", logger="fsm.transitions"):
        engine.fail(job_id, fence, "ValueError: bad row 7\nTraceback (most recent call last):\n...")
    (record,) = [r for r in caplog.records if "fail" in r.getMessage()]
    # the first line, marked as cut (" …": the traceback follows in the audit entry)
    assert record.getMessage().endswith("running -> retry_wait: ValueError: bad row 7 …")
    assert record.jobfsm["kind"] == "email"  # type: ignore[attr-defined]
    assert record.jobfsm["error"] == "ValueError: bad row 7 …"  # type: ignore[attr-defined]
