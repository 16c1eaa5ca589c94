"""The guards and effects that specs/job.toml names.

A guard reads the record and the event's arguments; an effect writes a field of
the new record or a note for its audit entry. Both are pure: all they know is
the `Step` they are given (record, event arguments, `now`, policy).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import BadInput, OperatorError
from ..records import Owner
from ..text import clean_text
from . import outside, prerequisites
from .step import Effect, Guard, Step

__all__ = ["EFFECTS", "ERASED", "GUARDS", "KIND_POLICY_FIELDS", "Effect", "Guard", "Step"]


# --- guards --------------------------------------------------------------------


def _due(s: Step) -> bool:
    return s.job.run_after <= s.now


def _before_deadline(s: Step) -> bool:
    return s.job.deadline is None or s.now < s.job.deadline


def _attempts_left(s: Step) -> bool:
    return s.job.attempt < s.job.max_attempts


def _retryable(s: Step) -> bool:
    return not s.args.get("permanent", False)


def _retry_before_deadline(s: Step) -> bool:
    return s.job.deadline is None or s.now + s.delay() < s.job.deadline


def _lease_lost(s: Step) -> bool:
    """The owner is confirmed dead, or its lease has lapsed by the caller's clock."""
    if s.args.get("verdict") == "dead":
        return True
    return s.job.lease_until is not None and s.now >= s.job.lease_until


def _retry_safe(s: Step) -> bool:
    return s.job.retry_safe


def _within_recovery_budget(s: Step) -> bool:
    return s.job.recoveries < s.job.max_recoveries


def _deadline_passed(s: Step) -> bool:
    return s.job.deadline is not None and s.now >= s.job.deadline


def _outcome(expected: str) -> Guard:
    def guard(s: Step) -> bool:
        outcome = s.args.get("outcome")
        if outcome not in ("succeeded", "failed"):
            raise OperatorError(
                f"job {s.job.id}: resolve needs outcome 'succeeded' or 'failed', got {outcome!r}"
            )
        return bool(outcome == expected)

    return guard


def _safe_to_rerun(s: Step) -> bool:
    """A retry-safe kind, or a run lost before any outside call: its handler declares
    that it marks before every outside call, and this attempt made no mark."""
    return _retry_safe(s) or s.job.marks == 0


def _has_reconciler(s: Step) -> bool:
    """The sweeper knows the kind's reconciler (it says so: the record cannot)."""
    return s.args.get("reconciler") is True


def _within_budget_or_final_check(s: Step) -> bool:
    """Within the recovery budget, or over it with the kind asking for one final check."""
    return _within_recovery_budget(s) or s.args.get("final_check") is True


GUARDS: dict[str, Guard] = {
    "due": _due,
    "before_deadline": _before_deadline,
    "attempts_left": _attempts_left,
    "retryable": _retryable,
    "retry_before_deadline": _retry_before_deadline,
    "lease_lost": _lease_lost,
    "retry_safe": _retry_safe,
    "within_recovery_budget": _within_recovery_budget,
    "deadline_passed": _deadline_passed,
    "outcome_succeeded": _outcome("succeeded"),
    "outcome_failed": _outcome("failed"),
    "safe_to_rerun": _safe_to_rerun,
    "has_reconciler": _has_reconciler,
    "within_budget_or_final_check": _within_budget_or_final_check,
    **outside.GUARDS,
    **prerequisites.GUARDS,
}


# --- effects -------------------------------------------------------------------


def _bump_fence(s: Step) -> None:
    s.changes["fence"] = s.job.fence + 1


def _owner_arg(s: Step) -> Owner:
    owner = s.args.get("owner")
    if isinstance(owner, Owner):
        s.data["owner"] = owner.to_dict()
        return owner
    if isinstance(owner, dict):
        return Owner.from_dict(owner)
    raise BadInput(f"job {s.job.id}: lease needs an owner")


def _lease_until(s: Step) -> float:
    until = s.args.get("lease_until")
    if until is None:
        until = s.now + s.policy.lease.ttl
        s.data["lease_until"] = until
    return float(until)


def _take_lease(s: Step) -> None:
    s.changes["owner"] = _owner_arg(s)
    s.changes["lease_until"] = _lease_until(s)


def _renew_lease(s: Step) -> None:
    s.changes["lease_until"] = _lease_until(s)


def _bump_attempt(s: Step) -> None:
    s.changes["attempt"] = s.job.attempt + 1


def _start_attempt(s: Step) -> None:
    s.changes["started_at"] = s.now


#: the fields of a kind's policy that `start` stamps onto the job (`_enforce_kind_policy`)
KIND_POLICY_FIELDS = (
    "retry_safe",
    "max_attempts",
    "timeout",
    "max_recoveries",
    "deadline_after",
    "marks_outside_calls",
    "reconciler",
)


_KIND_POLICY_KEYS = frozenset(KIND_POLICY_FIELDS)


def _number(s: Step, name: str, value: Any, *, integer: bool) -> float:
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < math.inf:
        raise BadInput(f"job {s.job.id}: kind policy {name} must be a positive number")
    return value


def _enforce_kind_policy(s: Step) -> None:
    """The running handler's kind policy is the policy of record, stamped at start.

    Its `retry_safe` replaces what the submitter stored, loosening as well as
    tightening (a submitter that did not know the kind stored it fail-closed), except
    that an explicit per-job `retry_safe=False` at submit (`Job.retry_safe_pinned`)
    is never loosened. Its bounds only tighten: a job is never given more attempts,
    recoveries or time than it was submitted with (a per-job bound is the caller's).
    The attempt being started and the recoveries already counted stay within the
    budget, so the invariants on attempts and recoveries hold across the change.
    The audit entry's `effective_policy` shows what was stamped.
    """
    policy = s.args.get("kind_policy")
    changes = s.changes
    if policy is None:
        # without a kind policy: whether an outside call began is unknown (marks None)
        changes["marks"] = None
        changes["reconciler"] = False
        return
    if not isinstance(policy, dict) or not _KIND_POLICY_KEYS.issuperset(policy):
        raise BadInput(f"job {s.job.id}: start's kind_policy takes only {KIND_POLICY_FIELDS}")
    marked = policy.get("marks_outside_calls", False)
    if not isinstance(marked, bool):
        raise BadInput(f"job {s.job.id}: kind policy marks_outside_calls must be true or false")
    # (the kind's reconciler flag tells sweeps without it to leave a lost run a while)
    # a handler that marks before every outside call lets a run lost before any mark
    # be re-run (`safe_to_rerun`); for any other, whether one began is unknown (None)
    changes["marks"] = 0 if marked else None
    reconciler = policy.get("reconciler", False)
    if not isinstance(reconciler, bool):
        raise BadInput(f"job {s.job.id}: kind policy reconciler must be true or false")
    changes["reconciler"] = reconciler
    job = s.job
    retry_safe, max_attempts, max_recoveries = job.retry_safe, job.max_attempts, job.max_recoveries
    timeout, deadline = job.timeout, job.deadline
    if (safe := policy.get("retry_safe")) is not None:
        if not isinstance(safe, bool):
            raise BadInput(f"job {job.id}: kind policy retry_safe must be true or false")
        changes["retry_safe"] = retry_safe = safe and not job.retry_safe_pinned
    if (value := policy.get("max_attempts")) is not None:
        cap = int(_number(s, "max_attempts", value, integer=True))
        changes["max_attempts"] = max_attempts = max(job.attempt + 1, min(max_attempts, cap))
    if (value := policy.get("max_recoveries")) is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadInput(f"job {job.id}: kind policy max_recoveries must be an integer >= 0")
        changes["max_recoveries"] = max_recoveries = max(job.recoveries, min(max_recoveries, value))
    if (value := policy.get("timeout")) is not None:
        limit = _number(s, "timeout", value, integer=False)
        changes["timeout"] = timeout = float(limit if timeout is None else min(timeout, limit))
    if (value := policy.get("deadline_after")) is not None:
        after = _number(s, "deadline_after", value, integer=False)
        latest = job.created_at + after
        changes["deadline"] = deadline = latest if deadline is None else min(deadline, latest)
    effective: dict[str, Any] = {
        "retry_safe": retry_safe,
        "max_attempts": max_attempts,
        "max_recoveries": max_recoveries,
        "timeout": timeout,
        "deadline": deadline,
    }
    if job.retry_safe_pinned:  # why a retry-safe handler left this job not retry-safe
        effective["retry_safe_pinned"] = True
    s.data["effective_policy"] = effective


#: what `erase` blanks: the payload (JSON null), the result and the progress (none)
ERASED = {"payload_json": "null", "result_json": None, "progress_json": None}


def _erase_data(s: Step) -> None:
    s.changes.update(ERASED)


def _store_result(s: Step) -> None:
    if "result_json" in s.args:
        s.changes["result_json"] = s.args["result_json"]


def _drop_lease(s: Step) -> None:
    s.changes["owner"] = None
    s.changes["lease_until"] = None


def _finish(s: Step) -> None:
    s.changes["finished_at"] = s.now


def _unfinish(s: Step) -> None:
    s.changes["finished_at"] = None


def _record_error(s: Step) -> None:
    error = s.args.get("error") or s.args.get("reason")
    if error is None and "verdict" in s.args:
        error = f"owner {s.args['verdict']}"
    if error is None and s.job.lease_until is not None and s.now >= s.job.lease_until:
        error = "lease expired"
    s.error = None if error is None else clean_text(str(error))
    if "error" in s.data and s.data["error"] is not None:
        s.data["error"] = s.error
    if s.data.get("traceback") is not None:  # the audit entry keeps it; the record does not
        s.data["traceback"] = clean_text(str(s.data["traceback"]))
    s.changes["last_error"] = s.error


def _clear_error(s: Step) -> None:
    """A job that ends succeeded keeps no `last_error`: an error is an earlier attempt's
    (or a lost run's) and stays in that attempt's audit entry, where `inspect` shows it."""
    s.changes["last_error"] = None


def _deadline_error(s: Step) -> None:
    s.error = f"deadline passed ({s.job.deadline})"
    s.changes["last_error"] = s.error


def _schedule_retry(s: Step) -> None:
    s.changes["run_after"] = s.now + s.delay()


def _retry_now(s: Step) -> None:
    """Due at once, in its original place: a recovered job is claimed ahead of newer work.

    Claims take due jobs by (priority, run_after, id); a lease leaves `run_after` as it
    was, so keeping it puts a job whose run was lost back where it stood in the queue,
    not behind every job submitted while it ran (a 2,500-job backlog kept one waiting
    for a minute). Never later than now, so it is due at once.
    """
    s.changes["run_after"] = min(s.job.run_after, s.now)


def _record_lost_owner(s: Step) -> None:
    """A recovery's audit entry names the owner that lost the run (`lost_owner`, read
    back with `AuditEntry.lost_owner`): the record forgets it with its lease."""
    if s.job.owner is not None:
        s.data["lost_owner"] = s.job.owner.to_dict()


def _count_recovery(s: Step) -> None:
    s.changes["recoveries"] = s.job.recoveries + 1


def _record_actor(s: Step) -> None:
    """Actor and reason go on the audit entry (the core checks they are given)."""


def _fresh_budget(s: Step) -> None:
    attempts = s.args.get("attempts")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise OperatorError(
            f"job {s.job.id}: requeue needs an explicit fresh attempt budget "
            f"(attempts >= 1), got {attempts!r}"
        )
    recoveries = s.args.get("recoveries")
    if recoveries is None:
        recoveries = s.policy.recovery.max_recoveries
        s.data["recoveries"] = recoveries
    s.changes["max_attempts"] = s.job.attempt + attempts
    s.changes["max_recoveries"] = s.job.recoveries + int(recoveries)
    s.changes["run_after"] = s.now
    s.changes["last_error"] = None


EFFECTS: dict[str, Effect] = {
    "create": lambda s: None,  # submit builds the record in fsm.lifecycle.core
    "bump_fence": _bump_fence,
    "take_lease": _take_lease,
    "renew_lease": _renew_lease,
    "bump_attempt": _bump_attempt,
    "start_attempt": _start_attempt,
    "enforce_kind_policy": _enforce_kind_policy,
    "erase_data": _erase_data,
    "store_result": _store_result,
    "drop_lease": _drop_lease,
    "finish": _finish,
    "unfinish": _unfinish,
    "record_error": _record_error,
    "clear_error": _clear_error,
    "deadline_error": _deadline_error,
    "schedule_retry": _schedule_retry,
    "retry_now": _retry_now,
    "record_lost_owner": _record_lost_owner,
    "count_recovery": _count_recovery,
    "record_actor": _record_actor,
    "fresh_budget": _fresh_budget,
    **outside.EFFECTS,
    **prerequisites.EFFECTS,
}
