"""What each row of the lifecycle does to a record, through the pure `decide`."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from fsm.errors import BadInput, IllegalTransition, LeaseLost, OperatorError
from fsm.jsonio import canonical
from fsm.lifecycle.core import ENTRY_FIELDS, decide, replay
from fsm.lifecycle.rules import EFFECTS, GUARDS
from fsm.lifecycle.spec import lifecycle
from fsm.policies import Backoff, LeasePolicy, Policy, RetryPolicy
from fsm.records import AUDIT_FIELDS, AuditEntry, Decision, Job, evolve_job

from .helpers import NOW, OTHER, OWNER, job_in


def policy(**kwargs: object) -> Policy:
    return Policy.seeded(7, **kwargs)


def test_submit_creates_a_queued_job_with_version_one_and_an_audit_entry() -> None:
    d = decide(None, "submit", NOW, policy(), id="J1", kind="email", payload_json="{}")
    assert d.job.state == "queued"
    assert d.job.version == 1
    assert d.job.fence == 0
    assert d.job.run_after == NOW
    assert d.job.correlation_id == "J1"
    assert d.job.max_attempts == 10
    assert d.job.max_recoveries == 3
    assert d.entry is not None
    assert (d.entry.event, d.entry.from_state, d.entry.to_state) == ("submit", None, "queued")


def test_submit_of_an_existing_job_is_illegal() -> None:
    with pytest.raises(IllegalTransition, match="already exists"):
        decide(job_in("queued"), "submit", NOW, policy(), id="J", kind="k", payload_json="1")


def test_submit_without_kind_or_with_unknown_fields_is_bad_input() -> None:
    with pytest.raises(BadInput, match="kind"):
        decide(None, "submit", NOW, policy(), id="J", payload_json="{}")
    with pytest.raises(BadInput, match="unknown fields"):
        decide(None, "submit", NOW, policy(), id="J", kind="k", payload_json="{}", color=1)


@pytest.mark.parametrize("state", ["queued", "retry_wait"])
def test_lease_of_a_due_job_bumps_the_fence_and_sets_owner_and_lease(state: str) -> None:
    job = job_in(state)
    d = decide(
        job, "lease", NOW, policy(lease=LeasePolicy(ttl=20, heartbeat_interval=5)), owner=OWNER
    )
    assert d.job.state == "leased"
    assert d.job.fence == job.fence + 1
    assert d.job.version == job.version + 1
    assert d.job.owner == OWNER
    assert d.job.lease_until == NOW + 20
    assert d.entry is not None
    assert d.entry.data["owner"] == OWNER.to_dict()


def test_lease_of_a_job_not_yet_due_or_past_its_deadline_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="due"):
        decide(job_in("queued", run_after=NOW + 1), "lease", NOW, policy(), owner=OWNER)
    with pytest.raises(IllegalTransition, match="before_deadline"):
        decide(job_in("queued", deadline=NOW), "lease", NOW, policy(), owner=OWNER)


def test_lease_without_an_owner_is_bad_input() -> None:
    with pytest.raises(BadInput, match="owner"):
        decide(job_in("queued"), "lease", NOW, policy())


def test_start_counts_the_attempt() -> None:
    job = job_in("leased")
    d = decide(job, "start", NOW, policy(), fence=job.fence)
    assert d.job.state == "running"
    assert d.job.attempt == job.attempt + 1
    assert d.job.started_at == NOW


def test_a_stale_fence_raises_lease_lost_with_a_rejected_entry_and_changes_nothing() -> None:
    job = job_in("running")
    with pytest.raises(LeaseLost) as info:
        decide(job, "succeed", NOW, policy(), fence=job.fence - 1, result_json="1")
    entry = info.value.entry  # type: ignore[attr-defined]
    assert entry.outcome == "rejected"
    assert entry.from_state == entry.to_state == "running"
    assert entry.version == job.version
    assert f"fence {job.fence - 1}" in str(info.value)


def test_a_worker_report_without_a_fence_is_bad_input() -> None:
    with pytest.raises(BadInput, match="fence"):
        decide(job_in("running"), "succeed", NOW, policy())


@pytest.mark.parametrize("state", ["leased", "running", "cancelling"])
def test_heartbeat_extends_the_lease_without_an_audit_entry(state: str) -> None:
    job = job_in(state)
    d = decide(job, "heartbeat", NOW, policy(), fence=job.fence)
    assert d.job.state == state
    assert d.job.lease_until == NOW + 30
    assert d.entry is None


@pytest.mark.parametrize(("state", "ends"), [("running", "succeeded"), ("cancelling", "cancelled")])
def test_succeed_stores_the_result_and_drops_the_lease(state: str, ends: str) -> None:
    job = job_in(state)
    d = decide(job, "succeed", NOW, policy(), fence=job.fence, result_json='{"ok":true}')
    assert d.job.state == ends
    assert d.job.result == {"ok": True}
    assert d.job.owner is None
    assert d.job.lease_until is None
    assert d.job.finished_at == NOW


def test_fail_with_attempts_left_waits_a_jittered_backoff_within_the_ceiling() -> None:
    backoff = Backoff(base=2.0, factor=3.0, cap=100.0)
    job = job_in("running", attempt=3)
    d = decide(job, "fail", NOW, policy(retry=RetryPolicy(backoff=backoff)), fence=2, error="boom")
    assert d.job.state == "retry_wait"
    assert NOW <= d.job.run_after <= NOW + min(100.0, 2.0 * 3.0**2)
    assert d.job.last_error == "boom"
    assert d.job.owner is None
    assert d.entry is not None
    assert d.entry.error == "boom"


def test_fail_with_an_explicit_delay_uses_it() -> None:
    d = decide(job_in("running"), "fail", NOW, policy(), fence=2, error="later", delay=42.0)
    assert d.job.run_after == NOW + 42.0


def test_fail_permanent_or_out_of_attempts_or_past_deadline_is_failed() -> None:
    p = policy()
    assert (
        decide(job_in("running"), "fail", NOW, p, fence=2, error="x", permanent=True).job.state
        == "failed"
    )
    spent = job_in("running", attempt=10, max_attempts=10)
    assert decide(spent, "fail", NOW, p, fence=2, error="x").job.state == "failed"
    near = job_in("running", deadline=NOW + 5)
    assert decide(near, "fail", NOW, p, fence=2, error="x", delay=10.0).job.state == "failed"


def test_a_negative_retry_delay_is_bad_input() -> None:
    with pytest.raises(BadInput, match="delay"):
        decide(job_in("running"), "fail", NOW, policy(), fence=2, error="x", delay=-1)


def test_ambiguous_parks_the_job_in_investigate_with_the_reason() -> None:
    d = decide(job_in("running"), "ambiguous", NOW, policy(), fence=2, error="charge unknown")
    assert d.job.state == "investigate"
    assert d.job.last_error == "charge unknown"


def test_release_gives_an_unstarted_job_back_with_the_same_fence() -> None:
    job = job_in("leased")
    d = decide(job, "release", NOW, policy(), fence=job.fence)
    assert (d.job.state, d.job.fence, d.job.owner) == ("queued", job.fence, None)


def test_expire_needs_a_lapsed_lease_or_a_confirmed_death() -> None:
    live = job_in("leased", lease_until=NOW + 5)
    with pytest.raises(IllegalTransition, match="lease_lost"):
        decide(live, "expire", NOW, policy())
    assert decide(live, "expire", NOW, policy(), verdict="dead").job.state == "queued"
    assert decide(live, "expire", NOW + 5, policy()).job.state == "queued"


def test_expire_of_a_running_retry_safe_job_counts_a_recovery_and_retries_now() -> None:
    job = job_in("running", lease_until=NOW - 1)
    d = decide(job, "expire", NOW, policy(), verdict="dead", reason="pid 4242 gone")
    assert d.job.state == "retry_wait"
    assert d.job.recoveries == 1
    assert d.job.run_after <= NOW
    assert d.job.last_error == "pid 4242 gone"


@pytest.mark.parametrize("state", ["leased", "running", "cancelling", "reconciling"])
def test_every_expire_names_the_owner_that_lost_the_run(state: str) -> None:
    # given a job held by OWNER whose lease lapsed (a reconciling job: OTHER's claim)
    job = job_in(state, lease_until=NOW - 1)
    if state == "reconciling":
        job = attrs.evolve(job, owner=OTHER)
    # when it is expired
    d = decide(job, "expire", NOW, policy())
    # then the record forgets the owner and the audit entry names it
    assert d.entry is not None
    assert d.entry.lost_owner == job.owner
    assert d.entry.data["lost_owner"] == job.owner.to_dict()  # type: ignore[union-attr]
    assert d.job.owner != job.owner
    # and other entries name no lost owner
    cancel = decide(job_in("queued"), "cancel", NOW, policy(), actor="a", reason="r").entry
    assert cancel is not None
    assert cancel.lost_owner is None


def test_a_recovered_job_keeps_its_place_in_the_queue_and_is_due_at_once() -> None:
    # given a job that became due 10 s ago and was running when its owner died
    job = job_in("running", run_after=NOW - 10, lease_until=NOW - 1)
    # when it is expired
    d = decide(job, "expire", NOW, policy(), verdict="dead")
    # then it keeps its run_after (ahead of jobs submitted since), and is due now
    assert d.job.state == "retry_wait"
    assert d.job.run_after == NOW - 10
    # and a run_after in the future (a clock step back) is pulled in to now
    ahead = job_in("running", run_after=NOW + 5, lease_until=NOW - 1)
    assert decide(ahead, "expire", NOW, policy(), verdict="dead").job.run_after == NOW


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"retry_safe": False}, "not retry safe"),
        ({"recoveries": 3, "max_recoveries": 3}, "recovery budget spent"),
        ({"attempt": 10, "max_attempts": 10}, "attempts spent"),
    ],
)
def test_expire_of_a_running_job_goes_to_investigate_when_it_may_not_rerun(
    fields: dict[str, object], why: str
) -> None:
    job = job_in("running", lease_until=NOW - 1, **fields)
    d = decide(job, "expire", NOW, policy())
    assert d.job.state == "investigate", why
    assert d.job.recoveries == job.recoveries + 1
    assert d.job.last_error == "lease expired"


def test_expire_of_a_cancelling_job_cancels_it() -> None:
    d = decide(job_in("cancelling", lease_until=NOW - 1), "expire", NOW, policy())
    assert d.job.state == "cancelled"


@pytest.mark.parametrize("state", ["queued", "retry_wait", "leased"])
def test_cancel_before_running_cancels_at_once_with_actor_and_reason(state: str) -> None:
    d = decide(job_in(state), "cancel", NOW, policy(), actor="ada", reason="duplicate order")
    assert d.job.state == "cancelled"
    assert d.job.owner is None
    assert d.entry is not None
    assert (d.entry.actor, d.entry.reason) == ("ada", "duplicate order")


def test_cancel_of_a_running_job_asks_it_to_stop_and_keeps_the_owner() -> None:
    d = decide(job_in("running"), "cancel", NOW, policy(), actor="ada", reason="stop")
    assert d.job.state == "cancelling"
    assert d.job.owner == OWNER


def test_cancelled_ack_keeps_the_partial_result() -> None:
    d = decide(job_in("cancelling"), "cancelled_ack", NOW, policy(), fence=2, result_json="[1,2]")
    assert d.job.state == "cancelled"
    assert d.job.result == [1, 2]


@pytest.mark.parametrize("state", ["queued", "leased", "running", "retry_wait", "cancelling"])
def test_a_passed_deadline_fails_any_active_job(state: str) -> None:
    d = decide(job_in(state, deadline=NOW - 1), "deadline", NOW, policy())
    assert d.job.state == "failed"
    assert d.job.last_error is not None
    assert "deadline" in d.job.last_error


def test_deadline_before_it_passes_is_refused() -> None:
    with pytest.raises(IllegalTransition):
        decide(job_in("queued", deadline=NOW + 1), "deadline", NOW, policy())


@pytest.mark.parametrize("state", ["failed", "cancelled", "investigate"])
def test_requeue_needs_actor_reason_and_an_explicit_fresh_budget(state: str) -> None:
    job = job_in(state, attempt=4, recoveries=2)
    with pytest.raises(OperatorError, match="actor"):
        decide(job, "requeue", NOW, policy(), reason="fixed", attempts=2)
    with pytest.raises(OperatorError, match="reason"):
        decide(job, "requeue", NOW, policy(), actor="ops", reason="  ", attempts=2)
    with pytest.raises(OperatorError, match="attempt budget"):
        decide(job, "requeue", NOW, policy(), actor="ops", reason="fixed")
    d = decide(job, "requeue", NOW, policy(), actor="ops", reason="fixed", attempts=2)
    assert d.job.state == "queued"
    assert d.job.max_attempts == 6
    assert d.job.max_recoveries == 5
    assert d.job.finished_at is None
    assert d.job.run_after == NOW


def test_resolve_settles_investigate_as_the_operator_says() -> None:
    job = job_in("investigate")
    ok = decide(
        job, "resolve", NOW, policy(), outcome="succeeded", actor="ops", reason="seen in ledger"
    )
    assert ok.job.state == "succeeded"
    bad = decide(job, "resolve", NOW, policy(), outcome="failed", actor="ops", reason="not charged")
    assert bad.job.state == "failed"
    with pytest.raises(OperatorError, match="outcome"):
        decide(job, "resolve", NOW, policy(), outcome="maybe", actor="ops", reason="?")


def test_an_unknown_event_is_illegal_and_names_the_known_ones() -> None:
    with pytest.raises(IllegalTransition, match="unknown event"):
        decide(job_in("queued"), "explode", NOW, policy())


def test_decide_never_mutates_its_input() -> None:
    job = job_in("running")
    before = attrs.asdict(job)
    decide(job, "fail", NOW, policy(), fence=2, error="x")
    assert attrs.asdict(job) == before


def test_replay_of_a_full_path_reproduces_the_record() -> None:
    p = policy()
    d = decide(None, "submit", NOW, p, id="J9", kind="k", payload_json="{}")
    entries = [d.entry]
    job: Job = d.job
    steps: list[tuple[str, dict[str, object]]] = [
        ("lease", {"owner": OWNER}),
        ("start", {"fence": 1}),
        ("fail", {"fence": 1, "error": "flaky"}),
    ]
    for event, args in steps:
        d = decide(job, event, NOW + 1, p, **args)
        job, _ = d.job, entries.append(d.entry)
    later = job.run_after + 1
    for event, args in [
        ("lease", {"owner": OTHER}),
        ("start", {"fence": 2}),
        ("expire", {"verdict": "dead", "reason": "gone"}),
        ("lease", {"owner": OWNER}),
        ("start", {"fence": 3}),
        ("ambiguous", {"fence": 3, "error": "?"}),
        ("resolve", {"outcome": "succeeded", "actor": "ops", "reason": "ok"}),
    ]:
        d = decide(job, event, later, p, **args)
        job, _ = d.job, entries.append(d.entry)
    assert replay([e for e in entries if e is not None]) == job


def test_evolve_job_matches_attrs_evolve() -> None:
    job = job_in("running")
    changes = {"state": "failed", "version": 9, "owner": None, "last_error": "x"}
    assert evolve_job(job, changes) == attrs.evolve(job, **changes)
    with pytest.raises(TypeError, match="colour"):
        evolve_job(job, {"colour": "red"})


def test_a_decision_since_another_record_matches_attrs_evolve() -> None:
    submitted = decide(
        None, "submit", NOW, policy(), id="J", kind="k", payload_json="{}",
        after=("a",), on_failed_dependency="cancel", unique="u",
    )  # fmt: skip
    other = job_in("leased")
    # every field of a Decision is set, none to its default
    assert submitted.prerequisites
    assert submitted.entry is not None
    assert submitted.unique is not None
    fields = [f.name for f in attrs.fields(Decision)]
    assert fields == ["job", "entry", "event", "previous", "prerequisites", "unique"], (
        "a new Decision field must be carried by Decision.since"
    )
    assert submitted.since(other) == attrs.evolve(submitted, previous=other)
    assert submitted.since(None) == attrs.evolve(submitted, previous=None)


def test_error_text_is_bounded_and_nul_free_and_replays_identically() -> None:
    huge = "line\x00" * 5000
    d = decide(job_in("running"), "fail", NOW, policy(), fence=2, error=huge, permanent=True)
    assert d.job.last_error is not None
    assert len(d.job.last_error) <= 4000
    assert "\x00" not in d.job.last_error
    assert d.job.last_error.endswith("[truncated]")
    assert d.entry is not None
    assert d.entry.error == d.job.last_error
    assert d.entry.data["error"] == d.job.last_error
    again = decide(job_in("running"), "fail", NOW, policy(), **d.entry.data)
    assert again.job.last_error == d.job.last_error


@pytest.mark.parametrize("reason", ["nul\x00inside", "x" * 1001])
def test_operator_text_with_nul_or_over_the_bound_is_refused(reason: str) -> None:
    with pytest.raises(OperatorError, match="printable"):
        decide(job_in("failed"), "requeue", NOW, policy(), actor="ops", reason=reason, attempts=1)


def test_a_lost_run_past_its_deadline_fails_instead_of_waiting_to_retry() -> None:
    # given a retry-safe running job whose deadline passed while it ran, its owner dead
    job = attrs.evolve(job_in("running", retry_safe=True), deadline=NOW - 1.0)
    # when it expires
    d = decide(job, "expire", NOW, policy(), verdict="dead", reason="pid gone")
    # then it fails (a retry could never be leased), counting the lost run as a recovery
    assert (d.job.state, d.job.recoveries) == ("failed", job.recoveries + 1)
    assert d.job.finished_at == NOW


def test_start_enforces_the_kind_policy_stricter_only_and_records_it() -> None:
    leased = job_in("leased", recoveries=1)
    kind_policy = {
        "retry_safe": False,
        "max_attempts": 3,
        "max_recoveries": 5,
        "timeout": 2,
        "deadline_after": 60,
    }
    d = decide(leased, "start", NOW, policy(), fence=2, kind_policy=kind_policy)
    assert (d.job.retry_safe, d.job.max_attempts, d.job.max_recoveries) == (False, 3, 3)
    assert d.job.timeout == 2.0
    assert isinstance(d.job.timeout, float)
    assert d.job.deadline == leased.created_at + 60
    assert (d.job.marks, d.job.reconciler) == (None, False)
    assert d.entry is not None
    assert d.entry.data["effective_policy"] == {
        "retry_safe": False,
        "max_attempts": 3,
        "max_recoveries": 3,
        "timeout": 2.0,
        "deadline": leased.created_at + 60,
    }
    assert replay_start(leased, d.entry.data) == d.job


def replay_start(leased: Job, data: dict[str, object]) -> Job:
    return decide(leased, "start", NOW, policy(), **data).job


def test_start_kind_policy_never_loosens_a_bound_and_keeps_the_attempt_within_budget() -> None:
    leased = job_in(
        "leased", retry_safe=False, attempt=4, max_attempts=5, recoveries=2, timeout=1.0
    )
    d = decide(
        leased,
        "start",
        NOW,
        policy(),
        fence=2,
        kind_policy={"retry_safe": False, "max_attempts": 2, "max_recoveries": 0, "timeout": 9},
    )
    assert d.job.retry_safe is False
    assert d.job.attempt == 5
    assert d.job.max_attempts == 5  # the attempt being started stays within its budget
    assert d.job.max_recoveries == 2  # the recoveries already counted stay within it too
    assert d.job.timeout == 1.0


def test_start_stamps_a_retry_safe_handler_over_a_fail_closed_default() -> None:
    # given a job stored fail-closed by a submitter that did not know its kind
    leased = job_in("leased", retry_safe=False)
    # when a worker whose handler is retry-safe starts it
    d = decide(leased, "start", NOW, policy(), fence=2, kind_policy={"retry_safe": True})
    # then the handler's policy is the job's, and its start entry says so
    assert d.job.retry_safe is True
    assert d.entry is not None
    assert d.entry.data["effective_policy"]["retry_safe"] is True
    assert "retry_safe_pinned" not in d.entry.data["effective_policy"]
    assert replay_start(leased, d.entry.data) == d.job


def test_start_never_loosens_a_retry_safe_false_the_submitter_pinned() -> None:
    # given a job submitted with an explicit retry_safe=False
    leased = job_in("leased", retry_safe=False, retry_safe_pinned=True)
    # when a worker whose handler is retry-safe starts it
    d = decide(leased, "start", NOW, policy(), fence=2, kind_policy={"retry_safe": True})
    # then it stays not retry-safe, and the start entry names the pin as the reason
    assert (d.job.retry_safe, d.job.retry_safe_pinned) == (False, True)
    assert d.entry is not None
    assert d.entry.data["effective_policy"]["retry_safe"] is False
    assert d.entry.data["effective_policy"]["retry_safe_pinned"] is True


def test_start_by_a_handler_that_is_not_retry_safe_tightens_a_job_said_safe() -> None:
    leased = job_in("leased", retry_safe=True)
    d = decide(leased, "start", NOW, policy(), fence=2, kind_policy={"retry_safe": False})
    assert d.job.retry_safe is False


def test_start_without_a_kind_policy_leaves_the_stored_one() -> None:
    leased = job_in("leased", marks=3, reconciler=True)
    d = decide(leased, "start", NOW, policy(), fence=2)
    assert (d.job.marks, d.job.reconciler) == (None, False)
    assert (d.job.max_attempts, d.job.timeout, d.job.deadline) == (10, None, None)
    assert d.entry is not None
    assert "effective_policy" not in d.entry.data


def test_start_kind_policy_flags_set_marks_and_reconciler() -> None:
    flags = {"marks_outside_calls": True, "reconciler": True}
    d = decide(job_in("leased"), "start", NOW, policy(), fence=2, kind_policy=flags)
    assert (d.job.marks, d.job.reconciler) == (0, True)


@pytest.mark.parametrize(
    ("kind_policy", "named"),
    [
        ({"colour": "red"}, "takes only"),
        (["retry_safe"], "takes only"),
        ({"retry_safe": 1}, "retry_safe"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_recoveries": -1}, "max_recoveries"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"deadline_after": -1}, "deadline_after"),
        ({"marks_outside_calls": 1}, "marks_outside_calls"),
        ({"reconciler": "yes"}, "reconciler"),
    ],
)
def test_start_refuses_a_malformed_kind_policy(kind_policy: object, named: str) -> None:
    with pytest.raises(BadInput, match=named):
        decide(job_in("leased"), "start", NOW, policy(), fence=2, kind_policy=kind_policy)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"fence": 1, "result_json": "null"},
        {"owner": {"pid": 1, "host": "h", "incarnation": "i"}, "lease_until": 1030.5},
        {"b": [1, 2.5, None, True, "é\u2028\x00"], "a": {"z": {}, "y": []}, "n": float("nan")},
        {"when": NOW, "owner": OWNER, "ids": {"x"}},  # not JSON: written as str()
    ],
)
def test_audit_data_is_the_canonical_json_of_the_checking_encoder(data: dict[str, Any]) -> None:
    expected = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    assert canonical(data, lenient=True) == expected


def test_audit_data_with_a_cycle_is_refused_by_name() -> None:
    data: dict[str, Any] = {"a": 1}
    data["self"] = data
    with pytest.raises(ValueError, match="Circular reference"):
        canonical(data, lenient=True)


def test_every_rule_resolves_the_guards_and_effects_the_spec_names() -> None:
    for rule in lifecycle().rules:
        assert rule.guard_fns == tuple(GUARDS[g] for g in rule.guards)
        assert rule.effect_fns == tuple(EFFECTS[e] for e in rule.effects)


def test_decide_builds_audit_entries_and_decisions_in_their_field_order() -> None:
    # decide passes these positionally: a reordered record must fail here, not mislabel
    assert AUDIT_FIELDS == ENTRY_FIELDS
    assert tuple(f.name for f in attrs.fields(Decision))[:4] == (
        "job",
        "entry",
        "event",
        "previous",
    )
    running = job_in("running")
    d = decide(running, "fail", NOW, policy(), fence=2, error="boom", actor="w", reason="r")
    assert d.entry == AuditEntry(
        job_id=running.id,
        version=running.version + 1,
        at=NOW,
        event="fail",
        from_state="running",
        to_state="retry_wait",
        fence=2,
        attempt=1,
        actor="w",
        reason="r",
        error="boom",
        correlation_id="corr-1",
        outcome="applied",
        data_json=d.entry.data_json,
        code="handler_error",
        stage="handler",
    )
    assert (d.job.state, d.event, d.previous) == ("retry_wait", "fail", running)


def test_every_failure_entry_records_the_stage_of_the_state_it_left() -> None:
    # issue 37 item 11: claim, start, handler, report and recovery
    pol = policy()
    lost = {"verdict": "dead", "reason": "pid gone"}
    cases = [
        (decide(job_in("queued", deadline=NOW - 1), "deadline", NOW, pol), "claim"),
        (decide(job_in("leased", lease_until=NOW - 1), "expire", NOW, pol, **lost), "start"),
        (decide(job_in("running"), "fail", NOW, pol, fence=2, error="boom"), "handler"),
        (decide(job_in("running"), "ambiguous", NOW, pol, fence=2, error="?"), "handler"),
        (decide(job_in("running", lease_until=NOW - 1), "expire", NOW, pol, **lost), "handler"),
        (decide(job_in("reconciling", lease_until=NOW - 1), "expire", NOW, pol), "recovery"),
    ]
    for d, stage in cases:
        assert d.entry is not None
        assert (d.entry.event, d.entry.stage) == (d.event, stage), d.entry
    # a stale report is rejected at the report stage
    with pytest.raises(LeaseLost) as raised:
        decide(job_in("running"), "succeed", NOW, pol, fence=1)
    assert raised.value.entry.stage == "report"  # type: ignore[attr-defined]
    # and the entries of ordinary steps carry none
    ok = decide(job_in("running"), "succeed", NOW, pol, fence=2)
    assert ok.entry is not None
    assert ok.entry.stage is None
