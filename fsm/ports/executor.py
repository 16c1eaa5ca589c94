"""The executor port: attempts, their outcomes, and the pools that run them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs

from ..jsonio import DEFAULT_MAX_PAYLOAD_BYTES
from ..records import Job, job_to_json


class ExecutorFull(RuntimeError):
    """An executor was given an attempt with no free slot (the worker's bug, not the job's)."""


#: How an attempt ended. The worker maps each to an engine report (docs/workers.md).
OUTCOMES = (
    "succeeded",  # returned; result_json holds the JSON result
    "retry",  # raised Retry(after=); delay holds `after`
    "failed",  # raised anything else: retryable
    "permanent",  # raised Permanent, or a result that is not JSON
    "ambiguous",  # raised Ambiguous: the outside effect is unknown
    "cancelled",  # stopped cooperatively after its cancel token was set
    "timeout",  # ran past its per-attempt timeout and was killed
    "crashed",  # its process died (signal, os._exit, OOM kill)
    "killed",  # stopped by the executor on request (hard cancel, lease lost)
    "abandoned",  # could not be stopped (a thread) and was left to recovery
)


@attrs.frozen
class Outcome:
    """How one attempt ended; crosses process boundaries as JSON (`to_json`)."""

    status: str
    result_json: str | None = None
    error: str | None = None
    delay: float | None = None
    seconds: float = 0.0
    #: an unexpected error's traceback, kept apart from its one-line `error`
    traceback: str | None = None

    def to_json(self) -> str:
        import json

        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        import json

        data = json.loads(text)
        if not isinstance(data, dict) or data.get("status") not in OUTCOMES:
            raise ValueError(f"not an attempt outcome: {text[:200]!r}")
        return cls(
            status=str(data["status"]),
            result_json=data.get("result_json"),
            error=data.get("error"),
            delay=data.get("delay"),
            seconds=float(data.get("seconds") or 0.0),
            traceback=data.get("traceback"),
        )


class CancelToken(Protocol):
    """A settable flag: `threading.Event` in threads, `multiprocessing.Event` in children."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...


@attrs.frozen(eq=False)
class Attempt:
    """One run of a handler, as handed to an executor.

    `run` runs it in this process (thread executors); `target` names the handler by
    import path ("module:qualname") for executors that run it in another process,
    which rebuild the job from `job_json` (never a pickled object). Left out,
    `job_json` is made from `job` when first read, so an executor that runs
    attempts in this process never pays for the JSON. `arun` is set for an `async
    def` handler: an executor with an event loop awaits it there.
    """

    job: Job
    timeout: float
    target: str
    run: Callable[[], Outcome] = attrs.field(repr=False)
    cancelled: CancelToken = attrs.field(repr=False)
    #: most bytes of the result's JSON (the store's payload limit), on every executor
    result_limit: int = attrs.field(default=DEFAULT_MAX_PAYLOAD_BYTES, kw_only=True)
    #: for an `async def` handler: the attempt as a coroutine, for executors with an event
    #: loop (`run` still works anywhere: it runs the coroutine on a loop of its own)
    arun: Callable[[], Awaitable[Outcome]] | None = attrs.field(
        default=None, kw_only=True, repr=False
    )
    _job_json: str | None = attrs.field(default=None, kw_only=True, alias="job_json", repr=False)
    #: for executors that run the handler in another process: where the progress the
    #: handler reports there is handed, as JSON text (`Context.progress_from`)
    progress: Callable[[str], None] | None = attrs.field(default=None, kw_only=True, repr=False)
    #: stores one of the handler's marks (label, external_id), for executors whose
    #: handler runs in another process and sends its marks back (`ctx.mark`)
    mark: Callable[[str, str | None], None] | None = attrs.field(
        default=None, kw_only=True, repr=False
    )

    @property
    def job_json(self) -> str:
        """The job as JSON (`fsm.records.job_to_json`), made once, on first use."""
        if self._job_json is None:
            object.__setattr__(self, "_job_json", job_to_json(self.job))
        assert self._job_json is not None
        return self._job_json


class Executor(Protocol):
    """Runs attempts in bounded slots; restartable in place (a new generation).

    `done(attempt, outcome)` is called exactly once per submitted attempt of the
    current generation, from an executor thread; completions of an older generation
    are dropped. `cancel(job_id)` forwards the cancel token; `hard=True` stops the
    attempt now (a process executor kills the child; a thread executor abandons it).
    """

    def start(self, slots: int) -> None: ...

    @property
    def free(self) -> int: ...

    @property
    def generation(self) -> int: ...

    def submit(self, attempt: Attempt, done: Callable[[Attempt, Outcome], None]) -> None: ...

    def cancel(
        self,
        job_id: str,
        *,
        fence: int | None = None,
        hard: bool = False,
        reason: str = "cancelled",
    ) -> None:
        """Cancel run (job id, fence); without a fence, the job's newest run."""
        ...

    def restart(self, reason: str) -> None: ...

    def shutdown(self, wait: float) -> None: ...
