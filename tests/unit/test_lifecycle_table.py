"""The spec agrees with a hand-written copy of the lifecycle table, row by row.

The expected table below is written out by hand on purpose: if someone edits
specs/job.toml, this test fails until the change is made here too, so the
lifecycle cannot drift silently.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from fsm.errors import IllegalTransition, LeaseLost, OperatorError
from fsm.lifecycle.core import decide
from fsm.lifecycle.rules import Step
from fsm.lifecycle.spec import lifecycle
from fsm.policies import Policy

from .helpers import NOW, OWNER, job_in

EXPECTED: dict[tuple[str, str], set[str]] = {
    ("queued", "lease"): {"leased"},
    ("retry_wait", "lease"): {"leased"},
    ("leased", "start"): {"running"},
    ("leased", "heartbeat"): {"leased"},
    ("running", "heartbeat"): {"running"},
    ("cancelling", "heartbeat"): {"cancelling"},
    ("running", "succeed"): {"succeeded"},
    ("cancelling", "succeed"): {"cancelled"},
    ("running", "fail"): {"retry_wait", "failed"},
    ("running", "ambiguous"): {"investigate"},
    ("leased", "release"): {"queued"},
    ("leased", "expire"): {"queued"},
    ("running", "expire"): {"retry_wait", "failed", "reconciling", "investigate"},
    ("cancelling", "expire"): {"cancelled"},
    ("reconciling", "expire"): {"investigate"},
    ("running", "mark"): {"running"},
    ("cancelling", "mark"): {"cancelling"},
    ("reconciling", "reconcile"): {"succeeded", "retry_wait", "reconciling", "investigate"},
    ("reconciling", "recheck"): {"reconciling"},
    ("queued", "cancel"): {"cancelled"},
    ("retry_wait", "cancel"): {"cancelled"},
    ("leased", "cancel"): {"cancelled"},
    ("running", "cancel"): {"cancelling"},
    ("cancelling", "cancelled_ack"): {"cancelled"},
    ("queued", "deadline"): {"failed"},
    ("leased", "deadline"): {"failed"},
    ("running", "deadline"): {"failed"},
    ("retry_wait", "deadline"): {"failed"},
    ("cancelling", "deadline"): {"failed"},
    ("failed", "requeue"): {"queued", "waiting"},
    ("cancelled", "requeue"): {"queued", "waiting"},
    ("investigate", "requeue"): {"queued", "waiting"},
    ("investigate", "resolve"): {"succeeded", "failed"},
    ("succeeded", "erase"): {"succeeded"},
    ("failed", "erase"): {"failed"},
    ("cancelled", "erase"): {"cancelled"},
    # dependencies (docs/dependencies.md)
    ("waiting", "cancel"): {"cancelled"},
    ("waiting", "deadline"): {"failed"},
    ("waiting", "dependencies_met"): {"queued"},
    ("waiting", "dependency_failed"): {"cancelled", "queued", "investigate"},
}

STATES = {
    "queued",
    "leased",
    "running",
    "retry_wait",
    "cancelling",
    "reconciling",
    "succeeded",
    "failed",
    "cancelled",
    "investigate",
    "waiting",
}


def test_spec_declares_exactly_the_states_of_the_design() -> None:
    lc = lifecycle()
    assert set(lc.states) == STATES
    assert lc.terminal == {"succeeded", "failed", "cancelled"}
    assert lc.parked == {"investigate"}
    assert lc.initial == "queued"
    assert lc.create_rule.event == "submit"


def test_spec_table_matches_the_hand_written_table() -> None:
    lc = lifecycle()
    compiled = {key: {r.dest for r in rules} for key, rules in lc.table.items()}
    assert compiled == EXPECTED


def test_operator_events_are_exactly_cancel_requeue_resolve_and_erase() -> None:
    lc = lifecycle()
    operators = {e for e, spec in lc.events.items() if spec.operator}
    assert operators == {"cancel", "requeue", "resolve", "erase"}
    assert {e for e, spec in lc.events.items() if not spec.audited} == {"heartbeat"}


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (s, e)
        for s, e in itertools.product(sorted(STATES), sorted(lifecycle().events))
        if (s, e) not in EXPECTED and e != "submit"
    ],
)
def test_pairs_outside_the_table_raise_illegal_transition_naming_state_and_event(
    state: str, event: str
) -> None:
    job = job_in(state)
    args: dict[str, Any] = {"fence": job.fence, "actor": "ops", "reason": "test", "attempts": 1}
    with pytest.raises(IllegalTransition) as info:
        decide(job, event, NOW, Policy.seeded(0), **args)
    assert info.value.state == state
    assert info.value.event == event
    assert job.id in str(info.value)


def _transitions_dest(state: str, event: str, step: Step) -> str | None:
    """Drive the real `transitions` machine (one machine, plain model) for one event."""
    machine = lifecycle().machine
    model = SimpleNamespace(state=state)
    fired = machine.events[event].trigger(model, step=step)
    return model.state if fired else None


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED))
def test_decide_picks_the_same_destination_as_the_transitions_machine(
    state: str, event: str
) -> None:
    variants = [
        {},
        {"retry_safe": False},
        {"recoveries": 3},
        {"attempt": 10},
        {"deadline": NOW - 1},
        {"deadline": NOW + 0.5},
        {"lease_until": NOW - 1},
        {"run_after": NOW + 60},
        {"on_failed_dependency": "cancel"},
        {"on_failed_dependency": "run"},
        {"on_failed_dependency": "investigate"},
        {"retry_safe": False, "marks": 0},
        {"retry_safe": False, "marks": 1, "lease_until": NOW - 1},
        {"owner": None, "run_after": NOW - 1},
    ]
    args_variants: list[dict[str, Any]] = [
        {},
        {"permanent": True},
        {"verdict": "dead"},
        {"outcome": "failed"},
        {"prerequisites": {"P1": "failed", "P2": "running"}},
        {"prerequisites": {"P1": "gone", "P2": "succeeded"}},
        {"prerequisites": {"P1": "cancelled", "P2": "investigate"}},
        {"reconciler": True, "verdict": "dead"},
        {"reconciler": True, "final_check": True},
        {"answer": "done"},
        {"answer": "not_started"},
        {"answer": "still_running"},
    ]
    for fields, extra in itertools.product(variants, args_variants):
        job = job_in(state, **fields)
        args: dict[str, Any] = {
            "fence": job.fence,
            "owner": OWNER,
            "actor": "ops",
            "reason": "why",
            "attempts": 2,
            "outcome": "succeeded",
            "prerequisites": {"P1": "succeeded"},
            "label": "calling",
            "answer": "unknown",
            **extra,
        }
        try:
            ours = decide(job, event, NOW, Policy.seeded(3), **args).job.state
        except (IllegalTransition, LeaseLost, OperatorError):
            ours = None
        step = Step(job, NOW, Policy.seeded(3), dict(args))
        try:
            theirs = _transitions_dest(state, event, step)
        except OperatorError:
            theirs = None
        assert ours == theirs, (state, event, fields, extra)
