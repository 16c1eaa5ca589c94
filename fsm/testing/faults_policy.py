"""The `policy` fault model: the policy promises, checked against the real `decide`.

Hypothesis builds a record in any state of the spec (attempts, recoveries,
deadline, lease, retry safety all drawn), an event of the spec with arguments a
worker, a sweep or an operator could send, a time and a policy; the real
`decide` answers, and each answer is held to promises stated here from the
policy and the spec alone (never by calling `decide` again):

- P1 backoff: a retry the policy schedules waits at most the backoff ceiling
  for the attempt, never more than the cap, never less than zero;
- P2 deadline: no retry is scheduled at or past the job's deadline, and no lease
  is taken at or past it or before the job is due;
- P3 recoveries: every expire of a running job counts one recovery, as does every
  `still_running` reconciler answer, and nothing else changes the count;
- P4 retry safety: an expired running job that is not retry-safe is never made
  runnable again (it goes to investigate, or to its reconciler) unless its handler
  declares its marks and the attempt made none, a retry-safe one past its deadline
  fails, and a rerun stays within the recovery and attempt budgets;
- P5 attempts: a start never takes the attempt past max_attempts, and only a
  start moves the attempt;
- P6 fence and version: a lease (or a reconcile claim) bumps the fence by one,
  nothing else moves it;
  every decision bumps the version by one and its audit entry names the move.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import example, given
from hypothesis import strategies as st

from ..errors import JobFSMError
from ..lifecycle.core import decide
from ..lifecycle.spec import lifecycle
from ..policies import Backoff, Policy, RecoveryPolicy, RetryPolicy
from ..records import Job, Owner
from .faults_models import ModelRun

T0 = 1_700_000_000.0
OWNER = Owner(host="policy-sim", pid=1, incarnation="policy-incarnation")
#: the (state, event) pairs where retry, backoff, recovery and deadline rules bite
POLICY_PAIRS = (
    ("running", "fail"),
    ("running", "expire"),
    ("leased", "start"),
    ("queued", "lease"),
    ("retry_wait", "lease"),
)


@st.composite
def _case(draw: st.DrawFn) -> tuple[Job, str, float, Policy, dict[str, Any]]:
    spec = lifecycle()
    events = sorted(e for e, ev in spec.events.items() if not ev.creates)
    # mostly a (state, event) pair the spec has rules for, each as likely as another;
    # sometimes any state and event (the core must refuse what the spec lacks)
    roll = draw(st.integers(0, 9))
    if roll < 4:  # the pairs whose guards and effects carry the policy
        state, event = draw(st.sampled_from(POLICY_PAIRS))
    elif roll < 8:
        state, event = draw(st.sampled_from(sorted(spec.table)))
    else:
        state = draw(st.sampled_from(sorted(spec.states)))
        event = draw(st.sampled_from(events))
    now = T0 + draw(st.sampled_from((0.0, 1.0, 29.0, 31.0, 120.0, 500.0)))
    max_attempts = draw(st.integers(1, 8))
    # uniform, not hypothesis's lean to small numbers: high attempts are where backoff bites
    attempt = draw(st.sampled_from(range(max_attempts + 1)))
    max_recoveries = draw(st.integers(0, 3))
    recoveries = draw(st.integers(0, max_recoveries + 1))
    owned = state in ("leased", "running", "cancelling") or (
        state == "reconciling" and draw(st.booleans())  # a claimed reconcile, or waiting
    )
    lease_until = T0 + draw(st.sampled_from((-5.0, 0.0, 10.0, 30.0))) if owned else None
    # deadlines near `now`: the guards that read them are tested where they bite
    offsets = (-10.0, 0.0, 0.5, 2.0, 5.0, 20.0, 70.0)
    deadline = draw(st.one_of(st.none(), st.sampled_from(offsets).map(lambda d: now + d)))
    job = Job(
        id="01POLICYMODELJOB000000000",
        kind="policy",
        queue="policy",
        payload_json="{}",
        state=state,
        created_at=T0 - 100.0,
        updated_at=T0 - 1.0,
        run_after=T0 + draw(st.sampled_from((-1.0, 0.0, 5.0))),
        attempt=attempt,
        max_attempts=max_attempts,
        recoveries=recoveries,
        max_recoveries=max_recoveries,
        deadline=deadline,
        retry_safe=draw(st.booleans()),
        fence=draw(st.integers(0, 4)),
        version=draw(st.integers(1, 20)),
        owner=OWNER if owned else None,
        lease_until=lease_until,
        marks=draw(st.sampled_from((None, 0, 1))) if state in ("running", "cancelling") else None,
    )
    ev = spec.events[event]
    args: dict[str, Any] = {}
    if ev.fenced:
        args["fence"] = job.fence - 1 if draw(st.integers(0, 9)) == 9 else job.fence
    if ev.operator:
        args["actor"] = "policy-model"
        args["reason"] = "checked"
    if event == "fail":
        args["error"] = "handler raised"
        args["permanent"] = draw(st.integers(0, 3)) == 0
        args["delay"] = draw(st.sampled_from((None, None, None, 0.0, 7.5, 50.0)))
    elif event == "expire":
        verdict = draw(st.sampled_from((None, "dead", "unknown", "alive")))
        if verdict is not None:
            args["verdict"] = verdict
        if draw(st.integers(0, 3)) == 0:  # a sweeper that knows the kind's reconciler
            args.update(reconciler=True, owner=OWNER, final_check=draw(st.booleans()))
    elif event == "lease":
        args["owner"] = OWNER
    elif event == "requeue":
        args["attempts"] = draw(st.integers(1, 3))
    elif event == "resolve":
        args["outcome"] = draw(st.sampled_from(("succeeded", "failed")))
    elif event == "ambiguous":
        args["error"] = "outside effect unknown"
    elif event == "mark":
        args["label"] = "calling out"
        args["external_id"] = draw(st.sampled_from((None, "ext-1")))
    elif event == "reconcile":
        args["answer"] = draw(st.sampled_from(("done", "not_started", "still_running", "unknown")))
        if args["answer"] == "still_running":
            args["until"] = now + draw(st.sampled_from((1.0, 60.0, 10_000.0)))
    elif event == "recheck":
        args["owner"] = OWNER
    base = draw(st.sampled_from((0.5, 1.0, 4.0)))
    # a cap below this attempt's uncapped ceiling as often as one of the fixed caps: only
    # the cap then bounds the wait (P1's boundary, which a mean draw may otherwise miss)
    uncapped = base * 2.0 ** min(max(attempt - 1, 0), 64)
    cap = draw(st.sampled_from((2.0, 10.0, 60.0, uncapped / 2)))
    policy = Policy.seeded(
        draw(st.integers(0, 2**16)),
        retry=RetryPolicy(max_attempts=max_attempts, backoff=Backoff(base=base, cap=cap)),
        recovery=RecoveryPolicy(max_recoveries=max_recoveries),
    )
    return job, event, now, policy, args


#: P1's boundary, always checked first: a third attempt fails where base x factor**2
#: (16 s) is over the cap (2 s), without jitter, so the wait is the ceiling itself
CAP_BINDS: tuple[Job, str, float, Policy, dict[str, Any]] = (
    Job(
        id="01POLICYMODELJOB000000000",
        kind="policy",
        queue="policy",
        payload_json="{}",
        state="running",
        created_at=T0 - 100.0,
        updated_at=T0 - 1.0,
        run_after=T0 - 1.0,
        attempt=3,
        max_attempts=5,
        fence=1,
        version=7,
        owner=OWNER,
        lease_until=T0 + 30.0,
    ),
    "fail",
    T0,
    Policy.seeded(
        0, retry=RetryPolicy(max_attempts=5, backoff=Backoff(base=4.0, cap=2.0, jitter=False))
    ),
    {"fence": 1, "error": "handler raised", "permanent": False, "delay": None},
)


def _problems(
    job: Job, event: str, now: float, policy: Policy, args: dict[str, Any], *, new: Job, entry: Any
) -> list[str]:
    found: list[str] = []
    where = f"{event} on a {job.state} job (attempt {job.attempt}/{job.max_attempts}, "
    where += f"recoveries {job.recoveries}/{job.max_recoveries}, retry_safe {job.retry_safe})"

    def bad(code: str, text: str) -> None:
        found.append(f"{code} {where}: {text}")

    backoff = policy.retry.backoff
    if new.state == "retry_wait" and event == "fail":
        wait = new.run_after - now
        given_delay = args.get("delay")
        # the ceiling from the policy's numbers, not from Backoff.ceiling (under test)
        ceiling = min(
            backoff.cap, backoff.base * backoff.factor ** min(max(job.attempt - 1, 0), 64)
        )
        top = given_delay if given_delay is not None else ceiling
        if given_delay is None and wait > backoff.cap + 1e-6:
            bad("P1", f"backoff waits {wait:.3f}s, over the cap {backoff.cap}s")
        if wait > top + 1e-6 or wait < -1e-6:
            bad("P1", f"backoff waits {wait:.3f}s, outside [0, {top:.3f}]")
        if job.deadline is not None and new.run_after >= job.deadline:
            bad("P2", f"retry scheduled at {new.run_after}, at or past the deadline {job.deadline}")
        if args.get("permanent") or job.attempt >= job.max_attempts:
            bad("P4", "a permanent failure or one without attempts left was scheduled to retry")
    if event == "lease" and new.state == "leased":
        if job.deadline is not None and now >= job.deadline:
            bad("P2", f"leased at {now}, at or past the deadline {job.deadline}")
        if job.run_after > now:
            bad("P2", f"leased at {now} before it was due ({job.run_after})")
    expected_recoveries = job.recoveries + (
        (event == "expire" and job.state == "running")
        or (event == "reconcile" and new.state == "reconciling")  # still_running spends one
    )
    if new.recoveries != expected_recoveries:
        bad("P3", f"recoveries went {job.recoveries} -> {new.recoveries}")
    if event == "expire" and job.state == "running":
        past_deadline = job.deadline is not None and now >= job.deadline
        if new.state not in ("retry_wait", "investigate", "failed", "reconciling"):
            bad("P4", f"an expired running job went to {new.state}")
        within = job.recoveries < job.max_recoveries
        rerunnable = job.retry_safe or job.marks == 0
        could_rerun = within and job.attempt < job.max_attempts and not past_deadline
        if new.state == "reconciling" and (
            (rerunnable and could_rerun)
            or not args.get("reconciler")
            or not (within or args.get("final_check"))
        ):
            bad("P4", "a run was claimed for a reconciler it did not need or could not have")
        if new.state == "failed" and not (rerunnable and past_deadline and within):
            bad(
                "P4",
                "an expired running job failed while not past its deadline, not retry-safe or "
                "over its recovery budget",
            )
        if new.state == "retry_wait":
            if not rerunnable:
                bad("P4", "a job that is not retry-safe was made runnable after an outside call")
            if job.recoveries >= job.max_recoveries:
                bad("P4", "rerun past the recovery budget")
            if job.attempt >= job.max_attempts:
                bad("P4", "rerun without attempts left")
            if job.deadline is not None and now >= job.deadline:
                bad("P4", "rerun past its deadline")
    if event == "expire" and args.get("verdict") != "dead":
        lapsed = job.lease_until is not None and now >= job.lease_until
        if not lapsed:
            bad("P4", f"expired while its lease ran until {job.lease_until} (now {now})")
    if new.attempt != job.attempt + (event == "start"):
        bad("P5", f"attempt went {job.attempt} -> {new.attempt}")
    if new.attempt > new.max_attempts:
        bad("P5", f"attempt {new.attempt} over max_attempts {new.max_attempts}")
    claimed = (event == "expire" and new.state == "reconciling") or event == "recheck"
    if new.fence != job.fence + (event == "lease" or claimed):
        bad("P6", f"fence went {job.fence} -> {new.fence}")
    if new.version != job.version + 1:
        bad("P6", f"version went {job.version} -> {new.version}")
    if entry is not None and (
        entry.version != new.version
        or entry.from_state != job.state
        or entry.to_state != new.state
        or entry.fence != new.fence
    ):
        bad("P6", f"the audit entry {entry} does not name the move")
    return found


class PolicyModel:
    name: ClassVar[str] = "policy"
    about: ClassVar[str] = "retry, backoff, recovery and retry-safety promises against decide"
    examples: ClassVar[dict[str, int]] = {"quick": 1000, "default": 5000, "thorough": 50000}

    def run(self, ctx: ModelRun) -> None:
        spec = lifecycle()
        stats, coverage = ctx.stats, ctx.coverage

        @ctx.settings(self.examples[ctx.size])
        @given(_case())
        @example(CAP_BINDS)
        def decisions(case: tuple[Job, str, float, Policy, dict[str, Any]]) -> None:
            job, event, now, policy, args = case
            stats.checks["P1-P6 policy promises (decisions checked)"] += 1
            try:
                d = decide(job, event, now, policy, spec=spec, **args)
            except JobFSMError:
                stats.faults["policy: refused decision (illegal, stale or no guard)"] += 1
                return
            coverage.decide[(job.state, event)] += 1
            problems = _problems(job, event, now, policy, args, new=d.job, entry=d.entry)
            if problems:
                raise AssertionError("; ".join(problems))

        decisions()
