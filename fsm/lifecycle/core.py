"""`decide`: the one pure function that changes a job's state.

decide(job, event, now, policy, **args) -> Decision

It reads the compiled spec, checks the fence of worker reports and the actor of
operator events, picks the first transition whose guards hold, applies its
effects and returns the new record with the audit entry that explains it. It
does no I/O; stores carry decisions out with compare-and-set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs

from ..errors import BadInput, IllegalTransition, LeaseLost
from ..inputs import ON_FAILED_DEPENDENCY, NewJob, check_operator_text, check_unique
from ..jsonio import canonical
from ..policies import Policy
from ..records import AuditEntry, Decision, Job, evolve_job
from .codes import REJECTED_CODE, REJECTED_STAGE
from .rules import ERASED, Step
from .spec import Lifecycle, lifecycle
from .unique import scope

#: what `decide`'s submit takes: the fields of a new job (`fsm.inputs.NewJob`)
_CREATE_FIELDS = frozenset(f.name for f in attrs.fields(NewJob))
_REQUIRED_CREATE = ("id", "kind", "payload_json")


def _data_json(data: dict[str, Any]) -> str:
    """`data` as the canonical JSON of an audit entry (`fsm.jsonio.canonical`, lenient:
    an entry is always written)."""
    return canonical(data, lenient=True)


#: the order `decide` passes an applied entry's fields in (a test holds AuditEntry to it)
ENTRY_FIELDS = (
    "job_id",
    "version",
    "at",
    "event",
    "from_state",
    "to_state",
    "fence",
    "attempt",
    "actor",
    "reason",
    "error",
    "correlation_id",
    "outcome",
    "data_json",
    "code",
    "stage",
)


def _create(now: float, policy: Policy, args: dict[str, Any], lc: Lifecycle) -> Decision:
    missing = [k for k in _REQUIRED_CREATE if not args.get(k)]
    if missing:
        raise BadInput(f"submit is missing {', '.join(missing)}")
    unknown = set(args) - _CREATE_FIELDS
    if unknown:
        raise BadInput(f"submit got unknown fields {sorted(unknown)}")
    data = dict(args)
    data.setdefault("queue", "default")
    data.setdefault("run_after", now)
    data.setdefault("max_attempts", policy.retry.max_attempts)
    data.setdefault("max_recoveries", policy.recovery.max_recoveries)
    data.setdefault("correlation_id", data["id"])
    after = _prerequisites(data)
    unique = check_unique(data.pop("unique", None))
    if unique is not None:
        data["unique_key"] = unique.key
    job = Job(
        state=lc.create_rule.dest,
        created_at=now,
        updated_at=now,
        version=1,
        **{
            k: v
            for k, v in data.items()
            if (v is not None or k in ("deadline", "timeout")) and k != "after"
        },
    )
    step = Step(job, now, policy, data)
    rule = next(r for r in lc.create_rules or (lc.create_rule,) if r.holds(step))
    if rule.dest != job.state:
        job = evolve_job(job, {"state": rule.dest})
    entry = AuditEntry(
        job_id=job.id,
        version=1,
        at=now,
        event=lc.create_rule.event,
        from_state=None,
        to_state=job.state,
        fence=0,
        attempt=0,
        correlation_id=job.correlation_id,
        data_json=_data_json(data if unique is None else {**data, "unique": unique.to_dict()}),
        code=lc.create_rule.code,
    )
    return Decision(
        job=job,
        entry=entry,
        event=rule.event,
        previous=None,
        prerequisites=after,
        unique=None if unique is None else scope(unique, job.kind, now, lc),
    )


def _prerequisites(data: dict[str, Any]) -> tuple[str, ...]:
    """`after` and `on_failed_dependency` of a submit, as the record holds them: the
    rule is set exactly when there are prerequisites (fsm.inputs checks callers' values)."""
    after = data.get("after")
    if after is None or after == []:
        data.pop("after", None)
        if data.get("on_failed_dependency") is not None:
            raise BadInput("submit: on_failed_dependency needs prerequisites (after=)")
        return ()
    if not isinstance(after, list | tuple) or not all(isinstance(a, str) and a for a in after):
        raise BadInput(f"submit: after must be a list of job ids, got {after!r:.200}")
    data["after"] = list(after)
    rule = data.get("on_failed_dependency")
    if rule not in ON_FAILED_DEPENDENCY:
        raise BadInput(
            f"submit: on_failed_dependency must be one of {ON_FAILED_DEPENDENCY}, got {rule!r}"
        )
    return tuple(after)


def erased_data_json(data_json: str) -> str:
    """An audit entry's data with the payload and result it recorded blanked, as `erase`
    blanks the job. Stores apply it to every earlier audit entry of a job they erase, so
    the trail keeps no copy of what was erased and replaying it still gives the record."""
    data = json.loads(data_json)
    if not isinstance(data, dict) or not set(data) & set(ERASED):
        return data_json
    return _data_json({k: ERASED.get(k, v) for k, v in data.items()})


def rejected_entry(job: Job, event: str, now: float, fence: int, error: str) -> AuditEntry:
    """The audit entry that records a stale report; it changes nothing."""
    return AuditEntry(
        job_id=job.id,
        version=job.version,
        at=now,
        event=event,
        from_state=job.state,
        to_state=job.state,
        fence=fence,
        attempt=job.attempt,
        error=error,
        correlation_id=job.correlation_id,
        outcome="rejected",
        code=REJECTED_CODE,
        stage=REJECTED_STAGE,
    )


def decide(
    job: Job | None,
    event: str,
    now: float,
    policy: Policy,
    *,
    spec: Lifecycle | None = None,
    **args: Any,
) -> Decision:
    """Apply `event` to `job` at time `now`; raise instead of changing anything."""
    lc = spec or lifecycle()
    ev = lc.events.get(event)
    state = job.state if job is not None else None
    if ev is None:
        raise IllegalTransition(
            job.id if job else None, state, event, f"unknown event; known: {sorted(lc.events)}"
        )
    if ev.creates:
        if job is not None:
            raise IllegalTransition(job.id, state, event, "the job already exists")
        return _create(now, policy, args, lc)
    if job is None:
        raise IllegalTransition(None, None, event, "needs an existing job")
    if ev.operator:
        for key in ("actor", "reason"):
            check_operator_text(f"job {job.id}: operator event {event!r}", key, args.get(key))
    if ev.fenced:
        fence = args.get("fence")
        if isinstance(fence, bool) or not isinstance(fence, int):
            raise BadInput(f"job {job.id}: worker report {event!r} needs an integer fence")
        if fence != job.fence:
            err = LeaseLost(job.id, job.state, event, fence, job.fence)
            err.entry = rejected_entry(job, event, now, fence, str(err))  # type: ignore[attr-defined]
            raise err
    rules = lc.table.get((job.state, event))
    if not rules:
        raise IllegalTransition(job.id, job.state, event)
    step = Step(job, now, policy, args)
    for rule in rules:
        if rule.holds(step):
            break
    else:
        tried = "; ".join(f"to {r.dest!r} needs {' and '.join(r.guards)}" for r in rules)
        raise IllegalTransition(job.id, job.state, event, f"no guard holds: {tried}")

    for effect in rule.effect_fns:
        effect(step)
    changes = step.changes
    changes["state"] = rule.dest
    changes["version"] = job.version + 1
    changes["updated_at"] = now
    new = evolve_job(job, changes)
    entry = None
    if ev.audited:
        # positional, in ENTRY_FIELDS order: half the cost of keywords (every transition)
        entry = AuditEntry(
            job.id,  # job_id
            new.version,  # version
            now,  # at
            event,  # event
            job.state,  # from_state
            rule.dest,  # to_state
            new.fence,  # fence
            new.attempt,  # attempt
            args.get("actor"),  # actor
            args.get("reason"),  # reason
            step.error,  # error
            job.correlation_id,  # correlation_id
            "applied",  # outcome
            _data_json(step.data),  # data_json
            rule.code_for(step),  # code
            rule.stage,  # stage
        )
    return Decision(new, entry, event, job)  # job, entry, event, previous


def replay(
    entries: Iterable[AuditEntry], policy: Policy | None = None, *, spec: Lifecycle | None = None
) -> Job | None:
    """Rebuild a job from its audit trail by running every applied entry through `decide`.

    Heartbeats are not audited, so the replayed record matches the stored one in
    every field but `version`, `updated_at` and `lease_until`, which heartbeats own,
    and `progress_json`, which the owner writes beside its heartbeats.
    """
    job: Job | None = None
    pol = policy or Policy()
    for entry in entries:
        if entry.outcome != "applied":
            continue
        job = decide(job, entry.event, entry.at, pol, spec=spec, **entry.data).job
    return job


#: fields a heartbeat (or the owner's progress write) may change without an audit entry
HEARTBEAT_FIELDS = frozenset({"version", "updated_at", "lease_until", "progress_json"})


def same_except_heartbeats(a: Job, b: Job) -> bool:
    """True when `a` and `b` agree on every field a heartbeat cannot change."""
    return all(
        getattr(a, f.name) == getattr(b, f.name)
        for f in attrs.fields(Job)
        if f.name not in HEARTBEAT_FIELDS
    )
