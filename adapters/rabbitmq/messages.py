"""Wake-up messages: small JSON hints about a committed job. The store stays the truth."""

from __future__ import annotations

import json
from typing import Any

from fsm.records import Job

CONTENT_TYPE = "application/json"
REASON_HEADER = "x-jobfsm-reason"
QUEUE_HEADER = "x-jobfsm-queue"
_MAX_ID = 200


class PoisonMessage(ValueError):
    """A message that cannot be a wake-up; `reason` goes into the dead-letter header."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def encode(job: Job) -> bytes:
    """The wake-up body: job id, kind, fence, version and correlation id (hints only)."""
    hint = {
        "job_id": job.id,
        "kind": job.kind,
        "fence": job.fence,
        "version": job.version,
        "correlation_id": job.correlation_id,
    }
    return json.dumps(hint, separators=(",", ":")).encode("utf-8")


def decode(body: bytes, *, limit: int) -> dict[str, Any]:
    """The hint in `body`, or PoisonMessage naming what is wrong with it."""
    if len(body) > limit:
        raise PoisonMessage(f"message is {len(body)} bytes, over the limit of {limit}")
    try:
        hint = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise PoisonMessage(f"message is not JSON: {err}") from err
    if not isinstance(hint, dict):
        raise PoisonMessage(f"message is JSON {type(hint).__name__}, not an object")
    job_id = hint.get("job_id")
    if not isinstance(job_id, str) or not job_id or len(job_id) > _MAX_ID:
        raise PoisonMessage(f"message has no valid job_id (got {job_id!r:.80})")
    return hint
