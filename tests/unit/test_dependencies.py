"""Dependencies in the pure core and the input checks (docs/dependencies.md)."""

from __future__ import annotations

from typing import Any

import pytest

from fsm.errors import BadInput, IllegalTransition
from fsm.inputs import MAX_PREREQUISITES, check_prerequisites
from fsm.lifecycle.core import decide, replay, same_except_heartbeats
from fsm.policies import Policy

from .helpers import NOW, job_in

POLICY = Policy.seeded(0)


def _submit(**extra: Any) -> Any:
    return decide(None, "submit", NOW, POLICY, id="J1", kind="k", payload_json="1", **extra)


def test_a_submit_with_prerequisites_is_created_waiting_and_carries_them() -> None:
    d = _submit(after=["A", "B"], on_failed_dependency="run")
    assert d.job.state == "waiting"
    assert d.job.on_failed_dependency == "run"
    assert d.prerequisites == ("A", "B")
    assert d.entry is not None
    assert d.entry.data["after"] == ["A", "B"]


def test_a_submit_without_prerequisites_is_queued_as_before() -> None:
    d = _submit()
    assert (d.job.state, d.job.on_failed_dependency, d.prerequisites) == ("queued", None, ())


@pytest.mark.parametrize(
    ("after", "rule", "problem"),
    [
        ("A", None, "must be a list"),
        ([""], None, "a job id in after"),
        (["A"], "later", "on_failed_dependency must be one of"),
        (None, "run", "needs prerequisites"),
        ([f"J{i}" for i in range(MAX_PREREQUISITES + 1)], None, "at most 64"),
    ],
)
def test_bad_prerequisites_are_refused_naming_the_problem(
    after: Any, rule: Any, problem: str
) -> None:
    with pytest.raises(BadInput, match=problem):
        check_prerequisites(after, rule)


def test_repeated_prerequisites_count_once_and_the_rule_defaults_to_cancel() -> None:
    ids = ["A"] * (MAX_PREREQUISITES + 5) + ["B"]
    assert check_prerequisites(ids, None) == (["A", "B"], "cancel")


@pytest.mark.parametrize(
    ("rule", "states", "dest"),
    [
        ("cancel", {"A": "succeeded", "B": "succeeded"}, "queued"),
        ("cancel", {"A": "failed", "B": "running"}, "cancelled"),
        ("investigate", {"A": "cancelled", "B": "queued"}, "investigate"),
        ("run", {"A": "gone", "B": "succeeded"}, "queued"),
        ("cancel", {"A": "investigate"}, "cancelled"),
    ],
)
def test_a_waiting_job_goes_where_its_prerequisites_and_rule_say(
    rule: str, states: dict[str, str], dest: str
) -> None:
    job = job_in("waiting", on_failed_dependency=rule)
    for event in ("dependencies_met", "dependency_failed"):
        try:
            got = decide(job, event, NOW, POLICY, prerequisites=states)
        except IllegalTransition:
            continue
        assert got.job.state == dest
        return
    raise AssertionError(f"no release event applied; expected {dest}")


@pytest.mark.parametrize(
    ("rule", "states"),
    [
        ("cancel", {"A": "succeeded", "B": "running"}),
        ("run", {"A": "failed", "B": "retry_wait"}),  # run waits for every one to finish
        ("investigate", {"A": "queued"}),
    ],
)
def test_a_waiting_job_stays_while_its_prerequisites_are_pending(
    rule: str, states: dict[str, str]
) -> None:
    job = job_in("waiting", on_failed_dependency=rule)
    for event in ("dependencies_met", "dependency_failed"):
        with pytest.raises(IllegalTransition):
            decide(job, event, NOW, POLICY, prerequisites=states)


def test_a_release_event_without_prerequisite_states_is_bad_input() -> None:
    with pytest.raises(BadInput, match="prerequisites"):
        decide(job_in("waiting", on_failed_dependency="cancel"), "dependencies_met", NOW, POLICY)


def test_requeue_of_a_dependent_goes_back_to_waiting_and_replays() -> None:
    created = _submit(after=["A"], on_failed_dependency="cancel")
    failed = decide(
        created.job, "dependency_failed", NOW + 1, POLICY, prerequisites={"A": "failed"}
    )
    again = decide(
        failed.job, "requeue", NOW + 2, POLICY, actor="ops", reason="A fixed", attempts=1
    )
    assert (failed.job.state, again.job.state) == ("cancelled", "waiting")
    entries = [d.entry for d in (created, failed, again) if d.entry is not None]
    rebuilt = replay(entries, POLICY)
    assert rebuilt is not None
    assert same_except_heartbeats(rebuilt, again.job)


class _Recorder:
    """A delivery that records what it is asked to publish."""

    def __init__(self) -> None:
        self.published: list[list[str]] = []

    def publish(self, jobs: Any) -> None:
        self.published.append([j.id for j in jobs])

    def close(self) -> None:
        """Nothing to release."""


def test_a_released_job_is_announced_to_the_delivery_like_a_new_one() -> None:
    from adapters.memory import MemoryStore
    from fsm.clock import FakeClock
    from fsm.records import Owner
    from fsm.service.engine import Engine

    # given: a dependent waiting for one job, on an engine with a delivery
    delivery = _Recorder()
    engine = Engine(MemoryStore(), clock=FakeClock(), publisher=delivery)
    first = engine.submit("k", 1)
    waiting = engine.submit("k", 2, after=[first.id])
    assert delivery.published == [[first.id]]  # a waiting job gets no wake-up

    # when: the prerequisite succeeds
    (leased,) = engine.claim(Owner("h", 1, "i"), ids=[first.id])
    engine.start(leased.id, leased.fence)
    engine.succeed(leased.id, leased.fence, None)

    # then: the released job is published once, as queued
    assert delivery.published[-1] == [waiting.id]
    assert engine.get(waiting.id).state == "queued"


def test_a_job_whose_prerequisites_already_succeeded_is_announced_once() -> None:
    from adapters.memory import MemoryStore
    from fsm.clock import FakeClock
    from fsm.records import Owner
    from fsm.service.engine import Engine

    delivery = _Recorder()
    engine = Engine(MemoryStore(), clock=FakeClock(), publisher=delivery)
    first = engine.submit("k", 1)
    (leased,) = engine.claim(Owner("h", 1, "i"), ids=[first.id])
    engine.start(leased.id, leased.fence)
    engine.succeed(leased.id, leased.fence, None)
    later = engine.submit("k", 2, after=[first.id])
    assert later.state == "queued"
    assert delivery.published == [[first.id], [later.id]]
