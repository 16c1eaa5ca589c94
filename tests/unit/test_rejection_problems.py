"""`rejection_problems` (specs/invariants.md I7): every refused stale report is audited
as rejected once per (event, fence), on the reference store."""

from __future__ import annotations

import attrs
import pytest

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.clock import FakeClock
from fsm.errors import LeaseLost
from fsm.lifecycle.invariants import rejection_problems
from fsm.records import Owner

A = Owner(host="host-a", pid=101, incarnation="inc-a")


def test_stale_reports_of_one_event_under_two_fences_are_each_audited_once() -> None:
    # given a running job leased under fence 1
    engine = Engine(MemoryStore(), clock=FakeClock())
    job = engine.submit("safe", {})
    (leased,) = engine.claim(A, ("default",), ids=[job.id])
    engine.start(job.id, leased.fence)
    # when stale succeeds arrive under two other fences, the first one twice
    refused = set()
    for fence in (leased.fence - 1, leased.fence - 1, leased.fence + 1):
        with pytest.raises(LeaseLost):
            engine.succeed(job.id, fence, {"late": fence})
        refused.add(("succeed", fence))
    history = engine.history(job.id)
    # then each (event, fence) is audited once, and the check finds nothing
    assert rejection_problems(job.id, history, refused) == []
    # and a trail that lost the second fence's entry, or holds one twice, is caught
    later = [e for e in history if e.outcome == "rejected" and e.fence == leased.fence + 1]
    missing = [e for e in history if e not in later]
    assert rejection_problems(job.id, missing, refused) == [
        f"I7 job {job.id}: the stale report succeed with fence {leased.fence + 1} was "
        "refused (LeaseLost) but is not audited as rejected"
    ]
    twice = [*history, attrs.evolve(later[0], at=later[0].at + 1)]
    assert rejection_problems(job.id, twice, refused) == [
        f"I7 job {job.id}: the rejected report succeed with fence {leased.fence + 1} is "
        "audited 2 times, not once"
    ]
