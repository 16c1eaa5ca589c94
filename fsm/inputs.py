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
from .payloads import check_type

#: kinds, queues and other identifiers (also used in broker queue names and SQL values)
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
#: idempotency keys are caller data (an email, an order id)
MAX_KEY_CHARS = 255
#: correlation ids travel as broker message properties (AMQP short strings: 255 bytes)
MAX_CORRELATION_BYTES = 255
#: integers are stored in 64-bit columns
INT64_MAX = 2**63 - 1
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


def check_key(value: object, what: str = "an idempotency key") -> str:
    """Idempotency and unique keys: 1-255 printable characters."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_KEY_CHARS
        or not value.isprintable()
    ):
        raise BadInput(f"{what} must be 1-{MAX_KEY_CHARS} printable characters; got {value!r:.80}")
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


def _finite(value: float) -> bool:
    """A finite float, or an int that converts to one (10**400 does not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def seconds(what: str, value: object, *, positive: bool = False) -> float:
    """A finite duration: seconds as int or float, or a `datetime.timedelta`."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
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
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise BadInput(
            f"{what} must be seconds since the epoch (a finite number) or an aware datetime; "
            f"got {value!r:.80}"
        )
    return float(value)


#: `KindPolicy` fields the worker's `start` enforces wherever the job was submitted
_ENFORCED = {"enforced": True}


@attrs.frozen
class KindPolicy:
    """A kind's policy, declared with its handler.

    `queue` and `priority` are defaults applied at submit; `retry_safe`,
    `max_attempts`, `timeout`, `max_recoveries` and `deadline_after` are also
    stamped onto the job by the worker that runs the kind (at `start`: `retry_safe`
    both ways unless the job pinned `retry_safe=False`, the bounds stricter only), so
    they hold wherever the job was submitted.
    """

    queue: str = attrs.field(default="default")
    priority: int = 0
    max_attempts: int | None = attrs.field(default=None, metadata=_ENFORCED)
    timeout: float | None = attrs.field(default=None, metadata=_ENFORCED)
    retry_safe: bool = attrs.field(default=True, metadata=_ENFORCED)
    deadline_after: float | None = attrs.field(default=None, metadata=_ENFORCED)
    max_recoveries: int | None = attrs.field(default=None, metadata=_ENFORCED)
    #: the handler calls `ctx.mark(...)` before every outside call, so a run lost before
    #: any mark is safe to run again even when the kind is not retry-safe
    marks_outside_calls: bool = attrs.field(default=False, metadata=_ENFORCED)
    #: the payload's type (an attrs class or a pydantic model): submit validates and
    #: serializes the payload by it, the handler receives it typed (`fsm.payloads`)
    payload_type: type | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        check_name("queue", self.queue)
        check_bool("marks_outside_calls", self.marks_outside_calls)
        if self.payload_type is not None:
            check_type(self.payload_type)
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
        """What the worker's `start` enforces (its `kind_policy` argument): the fields
        marked enforced that are set (`retry_safe` always, a flag only when true)."""
        out: dict[str, Any] = {}
        for f in attrs.fields(KindPolicy):
            value = getattr(self, f.name)
            if f.metadata.get("enforced") and (f.name == "retry_safe" or value):
                out[f.name] = value
        return out


def _name(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_name(attribute.name, value)


def _optional(check: Any) -> Any:
    return attrs.validators.optional(check)


def _seconds(positive: bool) -> Any:
    def validate(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        seconds(attribute.name, value, positive=positive)

    return validate


def _integer(low: int) -> Any:
    def validate(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_int(attribute.name, value, low=low)

    return validate


def _moment(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    timestamp(attribute.name, value)


def _key(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_key(value)


def _correlation(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_correlation_id(value)


def _retry_safe(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_bool(attribute.name, value)


#: a field a caller passes to `submit` as an option (the others come from elsewhere)
_OPTION = {"option": True}

#: what a unique submit does when its scope holds a twin: return that job, or raise
#: `DuplicateJob` naming it (docs/uniqueness.md)
ON_DUPLICATE = ("return", "refuse")
#: most states a unique scope may name (the spec has a dozen)
MAX_UNIQUE_STATES = 32
#: the shortest unique time window (below a millisecond, clocks of two hosts disagree more)
MIN_UNIQUE_PERIOD = 0.001


def _unique_states(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise BadInput(f"unique states must be a list of state names; got {value!r:.80}")
    if not value or len(value) > MAX_UNIQUE_STATES:
        raise BadInput(
            f"unique states must name 1-{MAX_UNIQUE_STATES} states; got {len(value)} "
            "(leave states out for the default scope)"
        )
    return tuple(sorted({check_name("a state in unique states", s) for s in value}))


def _unique_period(value: object) -> float | None:
    if value is None:
        return None
    period = seconds("unique period", value, positive=True)
    if period < MIN_UNIQUE_PERIOD:
        raise BadInput(f"unique period must be at least {MIN_UNIQUE_PERIOD}s; got {period!r}")
    return period


@attrs.frozen
class Unique:
    """A unique submit (docs/uniqueness.md): at most one job of the kind per `key` in
    the scope, the jobs in one of `states` and, with `period` (seconds or a timedelta),
    created less than `period` ago. A submit whose scope holds a job returns that job,
    or with `on_duplicate="refuse"` raises `DuplicateJob` naming it.

    `states` left out: the live states (every state that is not final) without a
    period, every state with one ("one per key per hour"). The states are checked
    against the lifecycle when the job is decided (`fsm.lifecycle.unique.scope`).
    """

    key: str = attrs.field(validator=lambda _i, _a, v: check_key(v, what="unique key"))
    states: tuple[str, ...] | None = attrs.field(default=None, converter=_unique_states)
    period: float | None = attrs.field(default=None, converter=_unique_period)
    on_duplicate: str = attrs.field(default="return")

    @on_duplicate.validator
    def _on_duplicate(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in ON_DUPLICATE:
            raise BadInput(
                f"unique on_duplicate must be one of {', '.join(ON_DUPLICATE)}; got {value!r:.80}"
            )

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def check_unique(value: object) -> Unique | None:
    """`submit(unique=...)`: a `Unique`, or a mapping of its fields (JSON callers, the
    CLI), or a bare key (the default scope: one live job per key)."""
    if value is None or isinstance(value, Unique):
        return value
    if isinstance(value, str):
        return Unique(value)
    if isinstance(value, Mapping):
        names = {f.name for f in attrs.fields(Unique)}
        unknown = set(value) - names
        if unknown:
            raise BadInput(f"unique got unknown fields {sorted(unknown)}; known: {sorted(names)}")
        if "key" not in value:
            raise BadInput("unique needs a key")
        return Unique(**value)
    raise BadInput(f"unique must be a key, a Unique or a mapping of its fields; got {value!r:.80}")


@attrs.frozen(kw_only=True)
class NewJob:
    """A new job as `submit` makes it, every field checked. Its fields are the one list
    of what a submit sets: `SUBMIT_OPTIONS` (what a caller may pass) and the arguments
    `decide`'s submit takes are read from them."""

    id: str = attrs.field(validator=_name)
    kind: str = attrs.field(validator=_name)
    payload_json: str
    queue: str = attrs.field(validator=_name, metadata=_OPTION)
    priority: int = attrs.field(validator=_integer(-INT64_MAX), metadata=_OPTION)
    #: an option given as `run_after` (a time) or `delay` (seconds from now)
    run_after: float = attrs.field(validator=_moment, metadata=_OPTION)
    max_attempts: int = attrs.field(validator=_integer(1), metadata=_OPTION)
    #: the kind's policy or the engine's default, never an option of one submit
    max_recoveries: int = attrs.field(validator=_integer(0))
    deadline: float | None = attrs.field(validator=_optional(_moment), metadata=_OPTION)
    timeout: float | None = attrs.field(
        validator=_optional(_seconds(positive=True)), metadata=_OPTION
    )
    retry_safe: bool = attrs.field(validator=_retry_safe, metadata=_OPTION)
    #: the caller said `retry_safe=False` for this job: no handler's policy loosens it
    retry_safe_pinned: bool = attrs.field(default=False, validator=_retry_safe)
    idempotency_key: str | None = attrs.field(validator=_optional(_key), metadata=_OPTION)
    correlation_id: str | None = attrs.field(validator=_optional(_correlation), metadata=_OPTION)
    #: prerequisites (job ids) and the rule for a failed one: `check_prerequisites`
    after: list[str] | None = attrs.field(default=None, metadata=_OPTION)
    on_failed_dependency: str | None = attrs.field(default=None, metadata=_OPTION)
    #: a unique submit (`Unique`); the scope is resolved against the lifecycle by `decide`
    unique: Unique | None = attrs.field(default=None, converter=check_unique, metadata=_OPTION)


#: the options `Engine.submit` takes besides kind and payload (`delay` is the other way
#: to give `run_after`)
SUBMIT_OPTIONS = frozenset(
    {f.name for f in attrs.fields(NewJob) if f.metadata.get("option")} | {"delay"}
)


def new_job(
    job_id: str,
    kind: str,
    payload_json: str,
    opts: Mapping[str, Any],
    policy: KindPolicy | None,
    *,
    now: float,
    default_attempts: int,
    default_recoveries: int,
) -> NewJob:
    """The new job from `submit`'s options and the kind's policy.

    A kind the submitter has no policy for is stored fail-closed: not retry-safe,
    unless the caller says `retry_safe=True` explicitly. The worker that starts the
    job stamps its handler's policy over the stored one, loosening as well as
    tightening, but never over an explicit `retry_safe=False` (pinned on the job).
    The correlation id is the job's id unless given.
    """
    check_name("kind", kind)
    unknown = set(opts) - SUBMIT_OPTIONS
    if unknown:
        raise BadInput(
            f"submit got unknown options {sorted(unknown)}; known: {sorted(SUBMIT_OPTIONS)}"
        )
    kp = policy or KindPolicy(retry_safe=False)
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
    timeout = opts.get("timeout")
    if timeout is None:
        timeout = kp.timeout
    elif not isinstance(timeout, int | float) or isinstance(timeout, bool):
        timeout = seconds("timeout", timeout, positive=True)  # a timedelta, or refused
    after, on_failed = check_prerequisites(opts.get("after"), opts.get("on_failed_dependency"))

    def given(name: str, default: Any) -> Any:
        value = opts.get(name)
        return default if value is None else value

    return NewJob(
        id=job_id,
        kind=kind,
        payload_json=payload_json,
        queue=given("queue", kp.queue),
        priority=given("priority", kp.priority),
        run_after=start,
        max_attempts=given(
            "max_attempts", kp.max_attempts if kp.max_attempts is not None else default_attempts
        ),
        max_recoveries=kp.max_recoveries if kp.max_recoveries is not None else default_recoveries,
        deadline=deadline,
        timeout=None if timeout is None else float(timeout),
        retry_safe=given("retry_safe", kp.retry_safe),
        retry_safe_pinned=opts.get("retry_safe") is False,
        idempotency_key=opts.get("idempotency_key"),
        correlation_id=given("correlation_id", job_id),
        after=after,
        on_failed_dependency=on_failed,
        unique=opts.get("unique"),
    )


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
