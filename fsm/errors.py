"""The jobfsm exception tree: one base class, translated at the adapter edge."""

from __future__ import annotations

from typing import Any


class JobFSMError(Exception):
    """Base class of every error jobfsm raises."""


# --- lifecycle -----------------------------------------------------------------


class IllegalTransition(JobFSMError):
    """No transition of the spec applies to (state, event); nothing changed."""

    def __init__(self, job_id: str | None, state: str | None, event: str, detail: str = "") -> None:
        self.job_id = job_id
        self.state = state
        self.event = event
        self.detail = detail
        where = f"job {job_id}" if job_id else "new job"
        msg = f"{where}: event {event!r} is not allowed in state {state!r}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class LeaseLost(JobFSMError):
    """A report carried a fence that is no longer the job's fence; nothing changed."""

    def __init__(self, job_id: str, state: str, event: str, fence: int, current: int) -> None:
        self.job_id = job_id
        self.state = state
        self.event = event
        self.fence = fence
        self.current = current
        super().__init__(
            f"job {job_id}: stale report {event!r} with fence {fence} "
            f"(current fence {current}, state {state!r}); rejected"
        )


class VersionConflict(JobFSMError):
    """Compare-and-set failed: the job changed since it was read; nothing changed."""

    def __init__(self, job_id: str, expected: int, actual: int | None) -> None:
        self.job_id = job_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"job {job_id}: expected version {expected}, store has {actual}")


# --- bad input -----------------------------------------------------------------


class BadInput(JobFSMError, ValueError):
    """Input that is rejected before anything is stored."""


class JobNotFound(BadInput, LookupError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}")


class UnknownPrerequisite(BadInput, LookupError):
    """A submit named prerequisites (`after=`) that are not stored; nothing was written."""

    def __init__(self, job_id: str, missing: list[str]) -> None:
        self.job_id = job_id
        self.missing = list(missing)
        shown = ", ".join(self.missing[:5]) + (" ..." if len(self.missing) > 5 else "")
        super().__init__(
            f"new job {job_id}: after= names jobs that are not stored: {shown}; a job can wait "
            "only for jobs that already exist (submit the prerequisites first, in an earlier "
            "call: a batch cannot name its own jobs); nothing was written"
        )


class UnknownKind(BadInput):
    def __init__(self, kind: str, known: list[str] | None = None) -> None:
        self.kind = kind
        hint = f"; known kinds: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown job kind {kind!r}{hint}")


class PayloadError(BadInput):
    """A payload or result that is not JSON or is larger than the limit."""


class OperatorError(BadInput):
    """An operator event without actor or reason, or with a bad argument."""


class SpecError(JobFSMError):
    """A lifecycle spec that does not load or does not validate."""

    def __init__(self, path: str, key: str, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        super().__init__(f"{path}: {key}: {problem}")


class WaitTimeout(JobFSMError, TimeoutError):
    """`Engine.wait` gave up: the job did not reach a final state in time; nothing changed."""

    def __init__(self, job_id: str, state: str, timeout: float) -> None:
        self.job_id = job_id
        self.state = state
        self.timeout = timeout
        super().__init__(f"job {job_id}: still {state!r} after waiting {timeout}s")


class QueueFull(JobFSMError):
    """The queue is at its configured capacity (backpressure, like an HTTP 429)."""

    def __init__(self, queue: str, capacity: int) -> None:
        self.queue = queue
        self.capacity = capacity
        super().__init__(f"queue {queue!r} is full (capacity {capacity}); try again later")


class DuplicateJob(JobFSMError):
    """A unique submit that refuses duplicates (`Unique(on_duplicate="refuse")`) found
    a job of its kind and key in its scope; nothing was written. `job` is that job."""

    def __init__(self, job: Any, key: str) -> None:
        self.job = job
        self.key = key
        super().__init__(
            f"a job of kind {job.kind!r} with unique key {key!r} is already {job.state!r} in the "
            f"scope: job {job.id}; nothing was submitted"
        )


# --- stores and configuration --------------------------------------------------


class StoreError(JobFSMError):
    """A store failed; `retryable` says whether the same call may succeed later."""

    retryable = False


class TransientStoreError(StoreError):
    """Connection lost, serialization failure, lock timeout: safe to retry."""

    retryable = True


class SchemaError(StoreError):
    """The store's schema is missing, or newer than this jobfsm understands."""


class BadStoreURL(BadInput):
    """A store, executor or delivery reference that cannot be resolved."""


class MissingExtra(JobFSMError, ImportError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(
            f"{what} needs the '{extra}' extra: pip install -e '.[{extra}]' in a checkout, "
            f"or the wheel as './jobfsm-<version>-py3-none-any.whl[{extra}]' (jobfsm is not "
            "published on a package index: see docs/getting-started.md)"
        )


class HookFailed(JobFSMError):
    """A worker's set-up or clean-up hook raised: the worker stops (or did not start).
    Raised by the worker (`fsm.worker.hooks`) and by a process executor whose child's
    `child_init` failed."""

    def __init__(self, hook: str, target: str, error: str) -> None:
        self.hook = hook
        self.target = target
        self.error = error
        super().__init__(f"{hook} hook {target} failed: {error}; the worker stops")


# --- outcomes a handler raises -------------------------------------------------


class HandlerOutcome(JobFSMError):
    """Base of the exceptions a handler raises to choose its outcome."""


class Retry(HandlerOutcome):
    """Retry this job after `after` seconds (wins over the backoff policy)."""

    def __init__(self, after: float | None = None, message: str = "retry requested") -> None:
        if after is not None and (isinstance(after, bool) or after < 0):
            raise ValueError(f"Retry(after=) must be a non-negative number, got {after!r}")
        self.after = after
        super().__init__(message)


class Permanent(HandlerOutcome):
    """Fail this job now; retrying cannot help."""


class Ambiguous(HandlerOutcome):
    """The outside effect of this run is unknown: park the job for an operator."""
