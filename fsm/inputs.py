"""The one place that checks what callers hand to jobfsm before anything is stored.

Names, idempotency keys, correlation ids, times, counts and submit options are
checked here and nowhere else; the engine, the handler registry, the CLI and the
adapters call these functions. Each refusal is a `BadInput` that names the
argument and what it must be, and is raised before any write, so stored state is
never touched by bad input.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .errors import BadInput, OperatorError

#: kinds, queues and other identifiers (also used in broker queue names and SQL values)
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
#: idempotency keys are caller data (an email, an order id)
MAX_KEY_CHARS = 255
#: correlation ids travel as broker message properties (AMQP short strings: 255 bytes)
MAX_CORRELATION_BYTES = 255
#: integers are stored in 64-bit columns
INT64_MAX = 2**63 - 1
#: the options `Engine.submit` takes besides kind and payload
SUBMIT_OPTIONS = frozenset(
    {
        "queue",
        "priority",
        "run_after",
        "delay",
        "max_attempts",
        "deadline",
        "timeout",
        "retry_safe",
        "idempotency_key",
        "correlation_id",
        "after",
        "on_failed_dependency",
    }
)
#: most prerequisites one job may name (`after=`): each is a row of the store's
#: dependency table and a read whenever the job is considered for release
MAX_PREREQUISITES = 64
#: the rules a dependent may declare for a failed prerequisite (specs/job.toml's
#: dependency_failed event has one transition per rule)
ON_FAILED_DEPENDENCY = ("cancel", "run", "investigate")
#: what a dependent does when a prerequisite fails, unless it says otherwise
DEFAULT_ON_FAILED_DEPENDENCY = "cancel"


def check_name(what: str, value: object) -> str:
    """Kinds, queues and keys: 1-200 characters of letters, digits and `_ . : -`."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadInput(
            f"{what} must be 1-200 characters of letters, digits, '_', '.', ':' or '-'; "
            f"got {value!r:.80}"
        )
    return value


def check_key(value: object) -> str:
    """Idempotency keys: 1-255 printable characters."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_KEY_CHARS
        or not value.isprintable()
    ):
        raise BadInput(
            f"an idempotency key must be 1-{MAX_KEY_CHARS} printable characters; got {value!r:.80}"
        )
    return value


def check_correlation_id(value: object) -> str:
    """Correlation ids: printable text of 1-255 UTF-8 bytes (a broker message property)."""
    if (
        not isinstance(value, str)
        or not value
        or not value.isprintable()
        or len(value.encode("utf-8", "surrogatepass")) > MAX_CORRELATION_BYTES
        or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    ):
        raise BadInput(
            f"correlation_id must be printable text of 1-{MAX_CORRELATION_BYTES} UTF-8 bytes; "
            f"got {value!r:.80}"
        )
    return value


#: bound on an operator's actor and reason
MAX_OPERATOR_TEXT = 1000


def check_operator_text(what: str, key: str, value: object) -> str:
    """An operator's actor or reason: non-empty printable text of at most 1000 chars.

    `what` names the action (and job) in the error, an `OperatorError`.
    """
    if not isinstance(value, str) or not value.strip():
        raise OperatorError(f"{what} needs a non-empty {key}")
    if len(value) > MAX_OPERATOR_TEXT or not value.isprintable():
        raise OperatorError(
            f"{what}: {key} must be at most {MAX_OPERATOR_TEXT} printable characters"
        )
    return value


def check_int(what: str, value: object, *, low: int, high: int = INT64_MAX) -> int:
    """An integer (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput(f"{what} must be an integer from {low} to {high}; got {value!r:.80}")
    return value


def check_bool(what: str, value: object) -> bool:
    """True or False, nothing that merely looks like one ("no" is not False)."""
    if not isinstance(value, bool):
        raise BadInput(f"{what} must be true or false; got {value!r:.80}")
    return value


def seconds(what: str, value: object, *, positive: bool = False) -> float:
    """A finite duration: seconds as int or float, or a `datetime.timedelta`."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInput(
            f"{what} must be a finite number of seconds or a timedelta; got {value!r:.80}"
        )
    if value < 0 or (positive and value == 0):
        raise BadInput(f"{what} must be {'positive' if positive else '>= 0'}; got {value!r}")
    return float(value)


def timestamp(what: str, value: object) -> float:
    """A finite point in time: seconds since the epoch, or a timezone-aware datetime."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise BadInput(
                f"{what} is a naive datetime; give a timezone-aware one "
                "(e.g. datetime.now(timezone.utc)) or seconds since the epoch"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInput(
            f"{what} must be seconds since the epoch (a finite number) or an aware datetime; "
            f"got {value!r:.80}"
        )
    return float(value)


@attrs.frozen
class KindPolicy:
    """A kind's policy, declared with its handler.

    `queue` and `priority` are defaults applied at submit; `retry_safe`,
    `max_attempts`, `timeout`, `max_recoveries` and `deadline_after` are also
    enforced by the worker that runs the kind (at `start`, stricter only), so they
    hold wherever the job was submitted.
    """

    queue: str = attrs.field(default="default")
    priority: int = 0
    max_attempts: int | None = None
    timeout: float | None = None
    retry_safe: bool = True
    deadline_after: float | None = None
    max_recoveries: int | None = None
    #: the handler calls `ctx.mark(...)` before every outside call, so a run lost before
    #: any mark is safe to run again even when the kind is not retry-safe
    marks_outside_calls: bool = False

    def __attrs_post_init__(self) -> None:
        check_name("queue", self.queue)
        check_bool("marks_outside_calls", self.marks_outside_calls)
        check_int("priority", self.priority, low=-INT64_MAX)
        check_bool("retry_safe", self.retry_safe)
        if self.max_attempts is not None:
            check_int("max_attempts", self.max_attempts, low=1)
        if self.max_recoveries is not None:
            check_int("max_recoveries", self.max_recoveries, low=0)
        if self.timeout is not None:
            seconds("timeout", self.timeout, positive=True)
        if self.deadline_after is not None:
            seconds("deadline_after", self.deadline_after, positive=True)

    def enforced(self) -> dict[str, Any]:
        """What the worker's `start` enforces (the `policy` argument of the event)."""
        out: dict[str, Any] = {"retry_safe": self.retry_safe}
        for name in ("max_attempts", "timeout", "max_recoveries", "deadline_after"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.marks_outside_calls:
            out["marks_outside_calls"] = True
        return out


def submit_options(
    kind: str,
    opts: Mapping[str, Any],
    policy: KindPolicy | None,
    *,
    now: float,
    default_attempts: int,
    default_recoveries: int,
) -> dict[str, Any]:
    """The fields of a new job from `submit`'s options and the kind's policy.

    A kind the submitter has no policy for is stored fail-closed: not retry-safe,
    unless the caller says `retry_safe=True` explicitly.
    """
    check_name("kind", kind)
    unknown = set(opts) - SUBMIT_OPTIONS
    if unknown:
        raise BadInput(
            f"submit got unknown options {sorted(unknown)}; known: {sorted(SUBMIT_OPTIONS)}"
        )
    kp = policy or KindPolicy(retry_safe=False)
    queue = opts.get("queue")
    queue = check_name("queue", kp.queue if queue is None else queue)
    key = opts.get("idempotency_key")
    if key is not None:
        check_key(key)
    correlation = opts.get("correlation_id")
    if correlation is not None:
        check_correlation_id(correlation)
    run_after = opts.get("run_after")
    delay = opts.get("delay")
    if run_after is not None and delay is not None:
        raise BadInput("submit takes run_after or delay, not both")
    if run_after is not None:
        start = timestamp("run_after", run_after)
    else:
        start = now + (0.0 if delay is None else seconds("delay", delay))
    deadline = opts.get("deadline")
    if deadline is not None:
        deadline = timestamp("deadline", deadline)
    elif kp.deadline_after is not None:
        deadline = now + kp.deadline_after
    max_attempts = opts.get("max_attempts")
    if max_attempts is None:
        max_attempts = kp.max_attempts if kp.max_attempts is not None else default_attempts
    priority = opts.get("priority")
    timeout = opts.get("timeout")
    if timeout is None:
        timeout = kp.timeout
    retry_safe = opts.get("retry_safe")
    after, on_failed = check_prerequisites(opts.get("after"), opts.get("on_failed_dependency"))
    return {
        "after": after,
        "on_failed_dependency": on_failed,
        "kind": kind,
        "queue": queue,
        "priority": check_int(
            "priority", kp.priority if priority is None else priority, low=-INT64_MAX
        ),
        "run_after": start,
        "max_attempts": check_int("max_attempts", max_attempts, low=1),
        "max_recoveries": check_int(
            "max_recoveries",
            kp.max_recoveries if kp.max_recoveries is not None else default_recoveries,
            low=0,
        ),
        "deadline": deadline,
        "timeout": None if timeout is None else seconds("timeout", timeout, positive=True),
        "retry_safe": kp.retry_safe if retry_safe is None else check_bool("retry_safe", retry_safe),
        "idempotency_key": key,
        "correlation_id": correlation,
    }


def check_prerequisites(after: object, on_failed: object) -> tuple[list[str] | None, str | None]:
    """`after=` (job ids, at most MAX_PREREQUISITES, repeats dropped) and its
    `on_failed_dependency` rule ("cancel", the default, "run" or "investigate").

    Whether the ids exist is checked by the store, in the insert's transaction.
    """
    if after is None or (isinstance(after, list | tuple) and not after):
        if on_failed is not None:
            raise BadInput("on_failed_dependency needs prerequisites: give after=[job ids]")
        return None, None
    if isinstance(after, str) or not isinstance(after, list | tuple):
        raise BadInput(f"after must be a list of job ids; got {after!r:.80}")
    ids = list(dict.fromkeys(check_name("a job id in after", a) for a in after))
    if len(ids) > MAX_PREREQUISITES:
        raise BadInput(
            f"after names {len(ids)} jobs; a job may wait for at most {MAX_PREREQUISITES} "
            "(fsm.inputs.MAX_PREREQUISITES)"
        )
    rule = DEFAULT_ON_FAILED_DEPENDENCY if on_failed is None else on_failed
    if rule not in ON_FAILED_DEPENDENCY:
        raise BadInput(
            f"on_failed_dependency must be one of {', '.join(ON_FAILED_DEPENDENCY)}; "
            f"got {on_failed!r:.80}"
        )
    return ids, str(rule)
