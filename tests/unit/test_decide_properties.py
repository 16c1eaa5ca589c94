"""Property tests of the pure core: random event sequences over random policies.

Each sequence starts with a submit and then tries random events with random
arguments at a random, non-decreasing time. Illegal attempts must raise and
change nothing; legal ones must keep these invariants:

- the record is always in a declared state, reached by a rule of the spec;
- fence, version and recoveries never decrease; a recovery over budget parks the job;
- attempts never exceed max_attempts;
- a terminal state is left only through the operator's requeue (erase stays in it);
- a retry is never scheduled at or past the deadline;
- replaying the audit trail through `decide` reproduces the record.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fsm.errors import BadInput, IllegalTransition, LeaseLost
from fsm.lifecycle.core import decide, replay, same_except_heartbeats
from fsm.lifecycle.spec import lifecycle
from fsm.policies import Backoff, LeasePolicy, Policy, RecoveryPolicy, RetryPolicy
from fsm.records import AuditEntry, Job, Owner

OWNERS = [Owner("h1", 1, "a"), Owner("h2", 2, "b")]
EVENTS = sorted(e for e in lifecycle().events if e != "submit")

policies = st.builds(
    lambda seed, attempts, base, cap, ttl, recoveries: Policy.seeded(
        seed,
        retry=RetryPolicy(max_attempts=attempts, backoff=Backoff(base=base, cap=cap)),
        lease=LeasePolicy(ttl=ttl, heartbeat_interval=ttl / 3),
        recovery=RecoveryPolicy(max_recoveries=recoveries),
    ),
    st.integers(0, 2**16),
    st.integers(1, 5),
    st.floats(0.1, 10),
    st.floats(10, 1000),
    st.floats(3, 60),
    st.integers(0, 4),
)

#: one step: (event pick, seconds to advance, flag bits, retry delay)
steps = st.lists(
    st.tuples(st.integers(0, 99), st.floats(0, 120), st.integers(0, 63), st.floats(0, 50)),
    min_size=10,
    max_size=60,
)


def _raw(bits: int, delay: float) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if bits & 1:
        raw["stale"] = True
    if bits & 2:
        raw["permanent"] = True
    if bits & 4:
        raw["verdict"] = "dead"
    if bits & 8:
        raw["delay"] = delay
    raw["outcome"] = "failed" if bits & 16 else "succeeded"
    raw["owner"] = OWNERS[(bits >> 5) & 1]
    return raw


def _args(job: Job, event: str, raw: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "fence": job.fence - 1 if raw.get("stale") else job.fence,
        "owner": raw.get("owner", OWNERS[0]),
        "actor": "ops",
        "reason": "property test",
        "attempts": 2,
        "error": "boom",
        "result_json": "1",
    }
    for key in ("permanent", "verdict", "delay", "outcome"):
        if key in raw:
            args[key] = raw[key]
    args.setdefault("outcome", "succeeded")
    return args


@given(
    policy=policies,
    deadline=st.none() | st.floats(1, 2000),
    retry_safe=st.booleans(),
    script=steps,
)
def test_random_event_sequences_keep_every_core_invariant(
    policy: Policy,
    deadline: float | None,
    retry_safe: bool,
    script: list[tuple[int, float, int, float]],
) -> None:
    lc = lifecycle()
    now = 1_000.0
    d = decide(
        None,
        "submit",
        now,
        policy,
        id="P1",
        kind="k",
        payload_json="{}",
        deadline=None if deadline is None else now + deadline,
        retry_safe=retry_safe,
        max_attempts=policy.retry.max_attempts,
    )
    job = d.job
    trail: list[AuditEntry] = [d.entry] if d.entry else []
    for pick, advance, bits, delay in script:
        # Mostly events the spec has for the current state, so runs go deep;
        # sometimes any event, so illegal attempts are exercised too.
        legal = sorted(lc.events_from(job.state))
        pool = legal if legal and pick < 80 else EVENTS
        event = pool[pick % len(pool)]
        now += advance
        raw = _raw(bits, delay)
        before = job
        try:
            decision = decide(job, event, now, policy, **_args(job, event, raw))
        except (IllegalTransition, LeaseLost, BadInput):
            assert job == before  # an illegal attempt changes nothing
            continue
        new = decision.job
        assert new.state in lc.states
        assert any(r.dest == new.state for r in lc.table[(before.state, event)])
        assert new.fence >= before.fence
        assert new.version == before.version + 1
        assert new.recoveries >= before.recoveries
        if new.recoveries > before.recoveries and new.recoveries > new.max_recoveries:
            assert new.state == "investigate"  # over budget: parked, never rerun
        assert new.attempt <= new.max_attempts
        if before.state in lc.terminal:  # absorbing: left only by a requeue; erase stays
            assert event == "requeue" or (new.state == before.state and lc.events[event].operator)
        if new.state == "retry_wait" and new.deadline is not None:
            assert new.run_after < new.deadline
        if decision.entry is not None:
            trail.append(decision.entry)
        job = new
    rebuilt = replay(trail, policy)
    assert rebuilt is not None
    assert same_except_heartbeats(rebuilt, job)
