"""The guards and effects of run marks and reconcile answers (specs/job.toml `mark`,
`reconcile`, `recheck`); `fsm.lifecycle.rules` registers them with the others.

Pure, like every rule: all they know is the `Step` they are given.
"""

from __future__ import annotations

from math import isfinite
from typing import Any

from ..errors import BadInput
from ..text import clean_text
from .step import Effect, Guard, Step


def _recovery_counted_in_budget(s: Step) -> bool:
    """The expire that began this reconcile was counted within the recovery budget
    (a final check is counted over it)."""
    return s.job.recoveries <= s.job.max_recoveries


def _check_due(s: Step) -> bool:
    """A reconciling job nobody has claimed, whose next check is due."""
    return s.job.owner is None and s.job.run_after <= s.now


#: what a reconciler may answer (a failure is recorded as `unknown` with a `failure`)
ANSWERS = ("done", "not_started", "still_running", "unknown")


def answer_of(s: Step) -> str:
    answer = s.args.get("answer")
    if answer not in ANSWERS:
        raise BadInput(f"job {s.job.id}: reconcile needs answer one of {ANSWERS}, got {answer!r}")
    return str(answer)


def _answer_is(expected: str) -> Guard:
    return lambda s: answer_of(s) == expected


#: bounds on marks: per attempt, and characters of a label and of an external id
MAX_MARKS = 16
MAX_MARK_LABEL = 200
MAX_EXTERNAL_ID = 200


def _mark_text(s: Step, what: str, value: Any, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise BadInput(
            f"job {s.job.id}: a mark's {what} must be non-empty text of at most {limit} "
            f"characters; got {value!r:.80}"
        )
    if not value.isprintable():
        raise BadInput(f"job {s.job.id}: a mark's {what} must be printable text")
    return value


def _count_mark(s: Step) -> None:
    """Record one mark: bounded per attempt and in size; nothing is stored past a bound."""
    _mark_text(s, "label", s.args.get("label"), MAX_MARK_LABEL)
    external = s.args.get("external_id")
    if external is not None:
        _mark_text(s, "external_id", external, MAX_EXTERNAL_ID)
    done = s.job.marks or 0
    if done >= MAX_MARKS:
        raise BadInput(
            f"job {s.job.id}: attempt {s.job.attempt} already has {done} marks, "
            f"the most an attempt may record ({MAX_MARKS})"
        )
    s.changes["marks"] = done + 1


#: longest a `still_running` answer may put the next check off (seconds)
MAX_CHECK_DELAY = 3600.0
#: when a `still_running` answer names no time: the next check in this many seconds
DEFAULT_CHECK_DELAY = 60.0


def _check_later(s: Step) -> None:
    until = s.args.get("until")
    if until is None:
        until = s.now + DEFAULT_CHECK_DELAY
    if isinstance(until, bool) or not isinstance(until, int | float) or not isfinite(until):
        raise BadInput(f"job {s.job.id}: still_running needs a finite time, got {until!r}")
    until = min(max(float(until), s.now), s.now + MAX_CHECK_DELAY)
    s.data["until"] = until
    s.changes["run_after"] = until


def _record_answer(s: Step) -> None:
    """The reconciler's answer goes on the audit entry and, but for done, the record."""
    answer = answer_of(s)
    failure = s.args.get("failure")
    if failure is not None and answer != "unknown":
        raise BadInput(f"job {s.job.id}: a reconciler failure is recorded as answer 'unknown'")
    detail = failure if failure is not None else s.args.get("why")
    text = f"reconciler: {answer}" + ("" if detail is None else f" ({detail})")
    s.error = clean_text(text)[:1000]
    s.changes["last_error"] = None if answer == "done" else s.error


GUARDS: dict[str, Guard] = {
    "recovery_counted_in_budget": _recovery_counted_in_budget,
    "check_due": _check_due,
    "answer_done": _answer_is("done"),
    "answer_not_started": _answer_is("not_started"),
    "answer_still_running": _answer_is("still_running"),
}

EFFECTS: dict[str, Effect] = {
    "count_mark": _count_mark,
    "check_later": _check_later,
    "record_answer": _record_answer,
}
