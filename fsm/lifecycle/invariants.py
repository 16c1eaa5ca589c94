"""Invariant checks on one job's record and audit trail (specs/invariants.md).

Pure functions: they read a record, its audit trail, the compiled spec and the
policy, and return the violations they find (empty when the job is sound). The
fault suite runs them after every step; tests and operators can run them on any
store (`trail_problems(job, store.history(job.id), lifecycle(), policy)`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import attrs

from ..errors import JobFSMError
from ..policies import Policy
from ..records import AuditEntry, Job
from .core import HEARTBEAT_FIELDS, replay, same_except_heartbeats
from .spec import Lifecycle

#: states in which a job has an owner (the sources of the spec's heartbeat event)
OWNED_EVENT = "heartbeat"


def owned_states(spec: Lifecycle) -> frozenset[str]:
    """States whose job belongs to a lease holder: where a heartbeat applies."""
    return frozenset(spec.sources(OWNED_EVENT))


def fence_edges(spec: Lifecycle) -> frozenset[tuple[str | None, str, str]]:
    """(from, event, to) of the transitions that move the fence (a lease, a reconcile
    claim): an event such as expire moves it on some transitions only."""
    return frozenset((r.source, r.event, r.dest) for r in spec.rules if "bump_fence" in r.effects)


def _legal(spec: Lifecycle, entry: AuditEntry) -> bool:
    if entry.from_state is None:
        return any(
            entry.event == r.event and entry.to_state == r.dest
            for r in spec.create_rules or (spec.create_rule,)
        )
    rules = spec.table.get((entry.from_state, entry.event), ())
    return any(r.dest == entry.to_state for r in rules)


def trail_problems(
    job: Job, history: Sequence[AuditEntry], spec: Lifecycle, policy: Policy
) -> list[str]:
    """Every invariant of specs/invariants.md that the job's trail or record breaks.

    I2 fences and versions grow, recoveries within budget; I4 terminal states
    absorbing but for an audited operator event; I5 attempts and deadline; I6
    replay reproduces the record; I8 every entry is a legal, chained transition.
    """
    found: list[str] = []
    jid = job.id

    def bad(code: str, text: str) -> None:
        found.append(f"{code} job {jid}: {text}")

    applied = [e for e in history if e.outcome == "applied"]
    if not applied or applied[0].from_state is not None:
        bad("I8", "audit trail does not start with the creating event")
    bumpers = fence_edges(spec)
    state: str | None = None
    version = 0
    fence = 0
    deadline: float | None = None
    for i, e in enumerate(history):
        where = f"entry {i} ({e.event} {e.from_state}->{e.to_state} v{e.version})"
        if e.outcome == "rejected":
            if e.from_state != e.to_state or e.from_state != state:
                bad("I7", f"{where}: a rejected report must name the state it left unchanged")
            continue
        if e.outcome != "applied":
            bad("I8", f"{where}: unknown outcome {e.outcome!r}")
            continue
        if e.job_id != jid:
            bad("I8", f"{where}: belongs to job {e.job_id}")
        if not _legal(spec, e):
            bad("I8", f"{where}: not a transition of the spec")
        if e.from_state != state:
            bad("I8", f"{where}: starts from {e.from_state!r} but the trail was in {state!r}")
        if e.version <= version:
            bad("I2", f"{where}: version does not grow (previous {version})")
        if e.from_state is None:
            deadline = e.data.get("deadline")
        elif (e.from_state, e.event, e.to_state) in bumpers:
            if e.fence != fence + 1:
                bad("I2", f"{where}: a lease must bump the fence by one ({fence} -> {e.fence})")
            if e.event == "lease" and deadline is not None and e.at >= deadline:
                bad("I5", f"{where}: leased at {e.at}, at or after its deadline {deadline}")
        elif e.fence != fence:
            bad("I1", f"{where}: fence moved from {fence} to {e.fence} without a lease")
        if state in spec.terminal or state in spec.parked:
            ev = spec.events.get(e.event)
            if ev is None or not ev.operator or not e.actor or not e.reason:
                bad("I4", f"{where}: left final state {state!r} without an audited operator")
        leaves = e.from_state == "reconciling" and e.to_state != "reconciling"
        if leaves and e.event != "expire" and e.data.get("answer") is None:
            bad("I4", f"{where}: left reconciling without a reconciler answer")
        if e.code is None or e.code not in spec.codes:
            bad("I8", f"{where}: reason code {e.code!r} is not one of the spec's [codes]")
        if e.event == "expire" and e.lost_owner is None:
            bad("I8", f"{where}: a recovery's entry must name the owner that lost the run")
        if e.to_state == "retry_wait" and deadline is not None and e.event == "fail":
            delay = e.data.get("delay")
            if isinstance(delay, int | float) and e.at + delay >= deadline:
                bad("I5", f"{where}: retry scheduled at {e.at + delay}, past deadline {deadline}")
        state, version, fence = e.to_state, e.version, e.fence
    if state != job.state:
        bad("I6", f"record is {job.state!r} but its trail ends in {state!r}")
    if version > job.version:
        bad("I2", f"record version {job.version} is behind its trail ({version})")
    if fence != job.fence:
        bad("I2", f"record fence {job.fence} differs from its trail ({fence})")
    if job.attempt > job.max_attempts:
        bad("I5", f"attempt {job.attempt} exceeds max_attempts {job.max_attempts}")
    # The move to investigate counts the recovery that exhausted the budget: +1.
    if job.recoveries > job.max_recoveries + 1:
        bad("I2", f"recoveries {job.recoveries} exceed the budget {job.max_recoveries}")
    reruns = sum(1 for e in applied if e.event == "expire" and e.to_state == "retry_wait")
    if reruns > job.max_recoveries:
        bad("I2", f"{reruns} recovery reruns exceed the budget {job.max_recoveries}")
    try:
        replayed = replay(history, policy, spec=spec)
    except JobFSMError as err:
        bad("I6", f"replaying its trail fails: {err}")
    else:
        if replayed is None:
            bad("I6", "replaying its trail gives no job")
        elif not same_except_heartbeats(replayed, job):
            diff = [
                f"{f.name}: stored {getattr(job, f.name)!r} replayed {getattr(replayed, f.name)!r}"
                for f in attrs.fields(Job)
                if f.name not in HEARTBEAT_FIELDS
                and getattr(job, f.name) != getattr(replayed, f.name)
            ]
            bad("I6", "replay differs from the record: " + "; ".join(diff))
    return found


def rejection_problems(
    job_id: str, history: Sequence[AuditEntry], refused: Collection[tuple[str, int]]
) -> list[str]:
    """I7 of specs/invariants.md on a job's rejected entries: every stale report the
    store refused (`refused`: the (event, fence) of each report that raised
    `LeaseLost`) is in the trail as a rejected entry of that event and fence, and no
    (event, fence) is there twice: a stale worker repeating a report is audited once,
    a later run's report of the same event (another fence) is audited too
    (docs/stores.md, "Repeated stale reports are recorded once")."""
    found: list[str] = []
    audited = Counter((e.event, e.fence) for e in history if e.outcome == "rejected")
    for (event, fence), n in sorted(audited.items()):
        if n > 1:
            found.append(
                f"I7 job {job_id}: the rejected report {event} with fence {fence} is "
                f"audited {n} times, not once"
            )
    for event, fence in sorted(set(refused) - set(audited)):
        found.append(
            f"I7 job {job_id}: the stale report {event} with fence {fence} was refused "
            "(LeaseLost) but is not audited as rejected"
        )
    return found


def requeues(history: Sequence[AuditEntry]) -> int:
    """How many operator requeues the trail holds (each grants a fresh run)."""
    return sum(1 for e in history if e.outcome == "applied" and e.event == "requeue")


#: the events that give a job a lease (the fence moves): a job leased has been let run
LEASE_EVENT = "lease"


def dependency_problems(
    job: Job,
    history: Sequence[AuditEntry],
    prerequisites: Mapping[str, tuple[Job, Sequence[AuditEntry]] | None],
    spec: Lifecycle,
) -> list[str]:
    """D1/D2 of specs/invariants.md for a job with prerequisites (`prerequisites`: each
    prerequisite's record and trail as stored now, None if it was pruned).

    D1: a job whose rule is cancel or investigate is leased only after every
    prerequisite succeeded (succeeded is absorbing, so each stored one is succeeded
    now). D2: a job whose rule is run is leased only once every prerequisite finished:
    each stored one is final now, or an operator requeued it since.
    """
    if not any(e.outcome == "applied" and e.event == LEASE_EVENT for e in history):
        return []
    found: list[str] = []
    finals = spec.terminal | spec.parked
    for pid, stored in sorted(prerequisites.items()):
        if stored is None:
            continue  # pruned: only a finished job is pruned, never while a job waits for it
        pre, trail = stored
        if job.on_failed_dependency == "run":
            reopened = any(e.outcome == "applied" and e.event == "requeue" for e in trail)
            if pre.state not in finals and not reopened:
                found.append(
                    f"D2 job {job.id}: leased while its prerequisite {pid} is {pre.state!r}"
                )
        elif pre.state != "succeeded":
            found.append(
                f"D1 job {job.id} (on_failed_dependency={job.on_failed_dependency}): leased "
                f"while its prerequisite {pid} is {pre.state!r}"
            )
    return found
