"""What a handler sees (`Context`) and how its exit becomes an `Outcome`.

The same code runs a handler in a worker thread and in an executor's child
process, so a handler behaves alike on both executors. In a child, the job is
rebuilt from JSON and the handler is imported by name: nothing is pickled
(`fsm.handling.child`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import jsonio, payloads
from ..errors import (
    Ambiguous,
    BadInput,
    HandlerOutcome,
    PayloadError,
    Permanent,
    Retry,
)
from ..inputs import seconds
from ..ports import CancelToken, Outcome
from ..records import Job
from ..text import clean_text

log = logging.getLogger(__name__)


class JobCancelled(HandlerOutcome):
    """Raised by `ctx.check_cancelled()`: the handler stops cooperatively."""


_UNDECODED: Any = object()  # a payload not decoded yet (None is a payload)


class Context:
    """A handler's view of its attempt.

    - `job`, `payload` (decoded JSON), `attempt`, `fence` (for fencing outside writes)
    - `cancelled`: set on a cancel request, a lease loss, shutdown or timeout
    - `lease_lost`: set when this worker no longer owns the job (its result is discarded)
    - `progress(...)`: the latest progress; the worker stores it with the job, fenced and
      at a bounded rate, and keeps it as the partial result if the job is cancelled
      (docs/workers.md, "Progress")
    - `mark(label, external_id=...)`: record durably, under the fence, what the attempt
      is about to do outside, before doing it (docs/operations.md)
    """

    def __init__(
        self,
        job: Job,
        cancelled: CancelToken,
        lease_lost: CancelToken | None = None,
        *,
        progress_limit: int = jsonio.DEFAULT_MAX_PAYLOAD_BYTES,
        on_progress: Callable[[str], None] | None = None,
        marker: Marker | None = None,
        payload_type: type | None = None,
    ) -> None:
        self.job = job
        #: the kind's payload type: `payload` is an instance of it (docs/typed-payloads.md)
        self.payload_type = payload_type
        self.attempt = job.attempt
        self.fence = job.fence
        self.cancelled = cancelled
        self.lease_lost: CancelToken = lease_lost if lease_lost is not None else threading.Event()
        self.last_progress: dict[str, Any] | None = None
        self.progress_at: float | None = None
        #: the latest progress as JSON text, and how many values were taken so far
        self.progress_json: str | None = None
        self.progress_seq = 0
        #: most bytes of one progress value's JSON (the store's payload limit)
        self.progress_limit = progress_limit
        self._on_progress = on_progress
        self._progress_lock = threading.Lock()
        self.marker = marker
        self._payload: Any = _UNDECODED

    @property
    def payload(self) -> Any:
        """The job's payload, decoded on first use (bounded: `fsm.jsonio`)."""
        # kept by hand: functools.cached_property takes a lock per first use on Python
        # 3.11, once per job; two threads decoding at once get equal values
        value = self._payload
        if value is _UNDECODED:
            what = f"payload of job {self.job.id}"
            value = jsonio.decode(self.job.payload_json, what=what)
            if self.payload_type is not None:
                try:
                    value = payloads.from_data(self.payload_type, value, what)
                except BadInput as err:  # stored by a submitter that did not know the type
                    raise PayloadError(str(err)) from None
            self._payload = value
        return value

    def progress(self, **data: Any) -> None:
        """Record progress (keyword arguments, JSON values); the latest value wins.

        Cheap: no store write here. The worker writes the latest value with the job at
        most once per heartbeat interval, and once more when the attempt ends. A value
        that is not JSON, or whose JSON is over `progress_limit` bytes, raises
        PayloadError naming the job, and nothing is recorded (the previous value stays).
        """
        text = jsonio.encode(data, what=f"progress of job {self.job.id}", limit=self.progress_limit)
        self._take(text, data)
        if self._on_progress is not None:
            self._on_progress(text)

    def progress_from(self, text: str) -> None:
        """Take progress the handler reported in another process (its JSON text, from an
        executor's child); text that is not a JSON object within the limit is dropped."""
        try:
            if len(text) > self.progress_limit:
                raise PayloadError(f"{len(text)} bytes, over the limit of {self.progress_limit}")
            data = jsonio.decode(text, what=f"progress of job {self.job.id}")
            if not isinstance(data, dict):
                raise PayloadError(f"not a JSON object: {text[:80]!r}")
        except PayloadError as err:
            log.warning("job %s: progress from its child dropped: %s", self.job.id, err)
            return
        self._take(text, data)

    def _take(self, text: str, data: dict[str, Any]) -> None:
        with self._progress_lock:
            self.last_progress = data
            self.progress_json = text
            self.progress_at = time.time()
            self.progress_seq += 1
        log.debug("job %s progress %s", self.job.id, text)

    def latest_progress(self) -> tuple[int, str | None, float | None]:
        """(how many values were taken, the latest as JSON text, when: time.time())."""
        with self._progress_lock:
            return self.progress_seq, self.progress_json, self.progress_at

    def mark(self, label: str, *, external_id: str | None = None) -> None:
        """Record, before calling an outside system, what this attempt is about to do.

        Returns only once the mark is stored under this attempt's fence: then the
        handler may make the call. Raises LeaseLost when the fence is stale (another
        owner has the job: do not call), BadInput past the bounds (16 marks per
        attempt, 200 characters of label or external id; nothing is stored), and a
        StoreError when the store cannot take it (do not call either).
        """
        if self.marker is None:
            raise BadInput(f"job {self.job.id}: ctx.mark needs a worker to record it")
        self.marker(label, external_id)

    async def amark(self, label: str, *, external_id: str | None = None) -> None:
        """`mark` for an `async def` handler: the store write runs on a thread, so the
        event loop's other tasks go on meanwhile."""
        await asyncio.to_thread(self.mark, label, external_id=external_id)

    def check_cancelled(self) -> None:
        """Raise JobCancelled if this attempt was asked to stop."""
        if self.cancelled.is_set():
            raise JobCancelled(f"job {self.job.id}: stopped after a cancel request")


Handler = Callable[[Context], Any]
#: records a mark: (label, external_id) -> None once stored, or raises
Marker = Callable[[str, str | None], None]


def _error_text(err: BaseException) -> str:
    """The error as a one-line summary: its type and the first line of its message."""
    message = str(err).strip().split("\n", 1)[0]
    return clean_text(f"{type(err).__name__}: {message}" if message else type(err).__name__)


def _trace(err: BaseException) -> str:
    """An unexpected error's traceback (its tail), kept apart from the summary."""
    return clean_text("".join(traceback.format_exception(err)[-3:]))


def _retry_delay(err: Retry) -> float | None:
    """`Retry(after=)` as a delay, or None (the backoff policy) when it is not a finite
    number of seconds >= 0: a handler's bad value never blocks its job's report."""
    if err.after is None:
        return None
    try:
        return seconds("Retry(after=)", err.after)
    except BadInput as bad:
        log.warning("%s; the backoff policy decides the delay", bad)
        return None


def _begin(ctx: Context) -> Outcome | None:
    """Decode the payload before the handler runs: one that cannot be is this job's failure."""
    try:
        ctx.payload  # noqa: B018 - decoded here, on purpose
    except PayloadError as err:
        return Outcome(status="permanent", error=clean_text(str(err)))
    return None


def _raised(err: Exception, ctx: Context, began: float) -> Outcome:
    """How a handler that raised `err` ended (the one classification, sync and async)."""
    took = time.monotonic() - began
    if isinstance(err, Retry):
        return Outcome(
            status="retry",
            error=clean_text(f"Retry: {err}"),
            delay=_retry_delay(err),
            seconds=took,
        )
    if isinstance(err, Permanent):
        return Outcome(status="permanent", error=_error_text(err), seconds=took)
    if isinstance(err, Ambiguous):
        return Outcome(status="ambiguous", error=_error_text(err), seconds=took)
    if isinstance(err, JobCancelled):
        return Outcome(status="cancelled", error=clean_text(str(err)), seconds=took)
    status = "cancelled" if ctx.cancelled.is_set() else "failed"
    return Outcome(status=status, error=_error_text(err), traceback=_trace(err), seconds=took)


def _returned(result: Any, ctx: Context, began: float, limit: int) -> Outcome:
    """How a handler that returned `result` ended: its JSON, or permanent if it has none."""
    took = time.monotonic() - began
    try:
        result_json = jsonio.encode(result, what=f"result of job {ctx.job.id}", limit=limit)
    except PayloadError as err:
        return Outcome(status="permanent", error=str(err), seconds=took)
    return Outcome(status="succeeded", result_json=result_json, seconds=took)


def run_attempt(
    handler: Handler,
    ctx: Context,
    limit: int = jsonio.DEFAULT_MAX_PAYLOAD_BYTES,
    *,
    asynchronous: bool | None = None,
) -> Outcome:
    """Run `handler(ctx)` and classify how it ended; never raises (but BaseException).

    An `async def` handler given here (a thread or process executor) runs on an
    event loop of its own for this one attempt (`run_attempt_in_new_loop`). A caller
    that already knows whether it is (`HandlerSpec.asynchronous`) passes
    `asynchronous` and saves the inspection (1.7 us per attempt).
    """
    if is_async(handler) if asynchronous is None else asynchronous:
        return run_attempt_in_new_loop(handler, ctx, limit)
    began = time.monotonic()
    early = _begin(ctx)
    if early is not None:
        return early
    try:
        result = handler(ctx)
    except Exception as err:
        return _raised(err, ctx, began)
    return _returned(result, ctx, began, limit)


async def run_attempt_async(
    handler: Handler, ctx: Context, limit: int = jsonio.DEFAULT_MAX_PAYLOAD_BYTES
) -> Outcome:
    """`run_attempt` for an `async def` handler, awaited on the caller's loop.

    Cancelling the task that awaits this (a cancel request, a timeout) raises
    `asyncio.CancelledError` in the handler at its next `await`; if it lets it
    through, the attempt ends "cancelled" (the executor tells a timeout apart).
    """
    began = time.monotonic()
    early = _begin(ctx)
    if early is not None:
        return early
    try:
        result = await handler(ctx)
    except asyncio.CancelledError:
        took = time.monotonic() - began
        return Outcome(status="cancelled", error="handler task cancelled", seconds=took)
    except Exception as err:
        return _raised(err, ctx, began)
    return _returned(result, ctx, began, limit)


#: how often a loop made for one attempt looks at the attempt's cancel token
CANCEL_POLL = 0.05


def run_attempt_in_new_loop(
    handler: Handler, ctx: Context, limit: int = jsonio.DEFAULT_MAX_PAYLOAD_BYTES
) -> Outcome:
    """Run an `async def` handler on a new event loop, for executors without one.

    The cancel token (set on a cancel request, a timeout, a lost lease) cancels the
    handler's task, looked at every CANCEL_POLL seconds, as the asyncio executor does.
    """

    async def main() -> Outcome:
        task = asyncio.ensure_future(run_attempt_async(handler, ctx, limit))
        while not task.done():
            await asyncio.wait({task}, timeout=CANCEL_POLL)
            if ctx.cancelled.is_set() and not task.done():
                task.cancel()
                await asyncio.wait({task})
        return task.result()

    return asyncio.run(main())


def is_async(fn: Callable[..., Any]) -> bool:
    """True for an `async def` handler (or a callable object whose `__call__` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method, not callable()
    )


# --- crossing a process boundary as JSON ---------------------------------------------


def handler_path(fn: Callable[..., Any]) -> str:
    """ "module:qualname" of a handler, for executors that import it in a child."""
    return f"{fn.__module__}:{fn.__qualname__}"


#: between a handler's path and its payload type's in an attempt's target
TYPED = "|"


def typed_path(path: str, payload_type: type | None) -> str:
    """An attempt's target: the handler's path, and its payload type's if it has one
    (a process executor's child imports both)."""
    if payload_type is None:
        return path
    return f"{path}{TYPED}{payloads.type_path(payload_type)}"


def resolve(path: str) -> Handler:
    """Import a handler by "module:qualname"; a bad path raises Permanent naming it."""
    try:
        obj = payloads.import_named(path)
    except (ImportError, AttributeError, ValueError) as err:
        raise Permanent(f"handler {path!r} cannot be imported: {err}") from err
    if not callable(obj):
        raise Permanent(f"handler {path!r} is not callable")
    handler: Handler = obj
    return handler
