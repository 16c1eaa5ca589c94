"""What an executor's child process runs, and the messages it trades with its parent.

A process executor (`adapters.executors.ProcessExecutor`) starts children that run
`run_child_init` once (the worker's `child_init` hook, named by path), then
`run_target` per attempt: the handler named by path, on the job as JSON. A handler's
`ctx.mark(...)` in a child goes to the parent as a `MARK_OP` message; the parent
stores it and answers with `mark_reply`, which `raise_mark_reply` turns back into
the child's exception. Nothing here imports the worker: executors are adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import jsonio, payloads
from ..errors import BadInput, LeaseLost, Permanent, StoreError, TransientStoreError
from ..ports import CancelToken, Outcome
from ..records import Job, job_from_json
from .attempt import TYPED, Context, Marker, resolve, run_attempt


def describe(err: BaseException) -> str:
    """An error as one line: its type, and its message on one line if it has one."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def run_child_init(target: str) -> str | None:
    """In a child: import `target` and call it once; the error text, or None if it ran."""
    try:
        fn: Any = resolve(target)
        fn()
    except BaseException as err:  # even SystemExit: the parent must hear why
        return describe(err)
    return None


def run_target(
    path: str,
    job_json: str,
    cancelled: CancelToken,
    limit: int = jsonio.DEFAULT_MAX_PAYLOAD_BYTES,
    progress: Callable[[str], None] | None = None,
    *,
    marker: Marker | None = None,
) -> Outcome:
    """Run a handler named by path on a job given as JSON (in an executor's child);
    `limit` bounds the result's JSON and each progress value, as the store's payload
    limit does; `progress` carries each progress value (JSON text) to the parent;
    `marker` sends the handler's marks to the parent, which stores them."""
    job = job_from_json(job_json)
    path, _, typed = path.partition(TYPED)
    try:
        handler = resolve(path)
        payload_type = payloads.resolve_type(typed) if typed else None
    except (Permanent, BadInput) as err:
        return Outcome(status="permanent", error=str(err))
    ctx = Context(
        job,
        cancelled,
        progress_limit=limit,
        on_progress=progress,
        marker=marker,
        payload_type=payload_type,
    )
    return run_attempt(handler, ctx, limit)


# --- marks across the child channel (JSON both ways) ---------------------------------

#: the `op` of a child's mark message; the parent answers {"op": "marked", ...}
MARK_OP = "mark"


def mark_reply(err: BaseException | None) -> dict[str, Any]:
    """The parent's answer to a child's mark: stored, or the error to raise in the child."""
    if err is None:
        return {"op": "marked", "ok": True}
    kind = "lease_lost" if isinstance(err, LeaseLost) else "bad_input"
    if not isinstance(err, LeaseLost | BadInput):
        kind = "store"
    reply: dict[str, Any] = {"op": "marked", "ok": False, "kind": kind, "error": str(err)}
    if isinstance(err, StoreError):
        reply["retryable"] = err.retryable
    if isinstance(err, LeaseLost):
        reply.update(state=err.state, fence=err.fence, current=err.current)
    return reply


def raise_mark_reply(job: Job, reply: dict[str, Any]) -> None:
    """Raise in the child what the parent's mark reply says (nothing if it was stored)."""
    if reply.get("ok") is True:
        return
    error = str(reply.get("error", "mark not recorded"))
    kind = reply.get("kind")
    if kind == "lease_lost":
        raise LeaseLost(
            job.id,
            str(reply.get("state")),
            MARK_OP,
            int(reply.get("fence", job.fence)),
            int(reply.get("current", job.fence)),
        )
    if kind == "bad_input":
        raise BadInput(error)
    raise (TransientStoreError if reply.get("retryable") else StoreError)(error)
