"""Reason codes picked by rule: `code_rule = "..."` in specs/job.toml names one of
CODE_RULES, which reads the decision's `Step` and gives one of the codes it lists
(every one of them declared in the spec's [codes]; `jobfsm spec check` verifies it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import SpecError
from .outside import answer_of
from .rules import GUARDS
from .step import Step

#: the code of a rejected (stale) report's audit entry: the spec must declare it
REJECTED_CODE = "stale_fence"
#: the failure stage of a rejected (stale) report's audit entry: the spec must declare it
REJECTED_STAGE = "report"

#: the codes a confirmed death can carry (`Verdict.code`); anything else is `owner_dead`
OWNER_DEAD_CODES = (
    "owner_dead",
    "owner_dead_pid_gone",
    "owner_dead_lock_free",
    "owner_dead_not_held",
)


def _expire_cause(s: Step) -> str:
    if s.args.get("verdict") != "dead":
        return "lease_lapsed"
    cause = s.args.get("cause")
    return str(cause) if cause in OWNER_DEAD_CODES else "owner_dead"


def _investigate_cause(s: Step) -> str:
    job = s.job
    if job.recoveries >= job.max_recoveries:
        return "recoveries_exhausted"
    if not job.retry_safe:
        return "not_retry_safe"
    if job.attempt >= job.max_attempts:
        return "attempts_exhausted"
    return _expire_cause(s)


def _reconcile_claim_cause(s: Step) -> str:
    return _expire_cause(s) if GUARDS["within_recovery_budget"](s) else "final_check"


def _fail_retry_cause(s: Step) -> str:
    return "retry_requested" if s.args.get("delay") is not None else "handler_error"


def _fail_final_cause(s: Step) -> str:
    if s.args.get("permanent", False):
        return "permanent_error"
    if s.job.attempt >= s.job.max_attempts:
        return "attempts_exhausted"
    return "deadline_passed"


def _unsettled_cause(s: Step) -> str:
    """Why a reconcile answer parks the job in investigate."""
    answer = answer_of(s)
    if answer == "unknown":
        return "reconciler_failed" if s.args.get("failure") is not None else "reconciled_unknown"
    if answer == "not_started" and s.job.attempt >= s.job.max_attempts:
        return "attempts_exhausted"
    if answer == "not_started" and not GUARDS["before_deadline"](s):
        return "deadline_passed"
    return "recoveries_exhausted"


CodeRule = Callable[[Step], str]

#: rules that pick a transition's code from the arguments, with every code each can give
CODE_RULES: dict[str, tuple[CodeRule, tuple[str, ...]]] = {
    "expire_cause": (_expire_cause, ("lease_lapsed", *OWNER_DEAD_CODES)),
    "investigate_cause": (
        _investigate_cause,
        (
            "recoveries_exhausted",
            "not_retry_safe",
            "attempts_exhausted",
            "lease_lapsed",
            *OWNER_DEAD_CODES,
        ),
    ),
    "reconcile_claim_cause": (
        _reconcile_claim_cause,
        ("final_check", "lease_lapsed", *OWNER_DEAD_CODES),
    ),
    "fail_retry_cause": (_fail_retry_cause, ("handler_error", "retry_requested")),
    "fail_final_cause": (
        _fail_final_cause,
        ("permanent_error", "attempts_exhausted", "deadline_passed"),
    ),
    "unsettled_cause": (
        _unsettled_cause,
        (
            "reconciler_failed",
            "reconciled_unknown",
            "attempts_exhausted",
            "deadline_passed",
            "recoveries_exhausted",
        ),
    ),
}


def code_problems(
    data: dict[str, Any], events: dict[str, Any], path: str, identifier: re.Pattern[str]
) -> list[SpecError]:
    """Every audited transition names one declared reason code (or a rule giving only
    declared ones); an unaudited one names none."""
    found: list[SpecError] = []
    codes = data.get("codes", {})
    if not isinstance(codes, dict) or not all(isinstance(v, str) for v in codes.values()):
        return [SpecError(path, "codes", 'must be a table of code = "meaning"')]
    for name in codes:
        if not identifier.fullmatch(name):
            found.append(SpecError(path, f"codes.{name}", "a code must be a lower-case identifier"))
    if REJECTED_CODE not in codes:
        found.append(SpecError(path, "codes", f"must declare {REJECTED_CODE!r} (rejected reports)"))
    for name, body in events.items():
        if not isinstance(body, dict) or not isinstance(body.get("transitions"), list):
            continue
        audited = body.get("audited", True)
        for i, rule in enumerate(body["transitions"]):
            if not isinstance(rule, dict):
                continue
            at = f"events.{name}.transitions[{i}]"
            code, code_rule = rule.get("code"), rule.get("code_rule")
            if not audited:
                if code is not None or code_rule is not None:
                    found.append(SpecError(path, at, "an unaudited event carries no code"))
                continue
            if (code is None) == (code_rule is None):
                found.append(SpecError(path, at, "needs exactly one of code or code_rule"))
            elif code is not None and code not in codes:
                found.append(SpecError(path, f"{at}.code", f"{code!r} is not declared in [codes]"))
            elif code_rule is not None:
                if code_rule not in CODE_RULES:
                    found.append(
                        SpecError(
                            path,
                            f"{at}.code_rule",
                            f"unknown code rule {code_rule!r} (not in fsm/lifecycle/codes.py)",
                        )
                    )
                    continue
                for given in CODE_RULES[code_rule][1]:
                    if given not in codes:
                        found.append(
                            SpecError(
                                path,
                                f"{at}.code_rule",
                                f"{code_rule!r} can give {given!r}, not declared in [codes]",
                            )
                        )
    return found
