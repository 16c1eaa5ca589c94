"""`Step`: the scratch space of one decision, shared by every guard and effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import BadInput
from ..policies import Policy
from ..records import Job


class Step:
    """Scratch space for one decision: the inputs and the changes being built."""

    __slots__ = ("args", "changes", "data", "error", "job", "now", "policy")

    def __init__(self, job: Job, now: float, policy: Policy, args: dict[str, Any]) -> None:
        self.job = job
        self.now = now
        self.policy = policy
        self.args = args
        self.changes: dict[str, Any] = {}
        #: resolved arguments, recorded in the audit entry so replay is exact.
        self.data: dict[str, Any] = dict(args)
        self.error: str | None = None

    def delay(self) -> float:
        """Seconds until the retry: `Retry(after=)` wins, else the backoff policy."""
        if "delay" not in self.data or self.data["delay"] is None:
            backoff = self.policy.retry.backoff
            draw = self.policy.jitter(self.job.id, self.job.attempt)
            self.data["delay"] = backoff.delay(self.job.attempt, draw)
        delay = self.data["delay"]
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 <= delay < float("inf")
        ):
            raise BadInput(f"job {self.job.id}: retry delay must be a finite number >= 0")
        return float(delay)


Guard = Callable[[Step], bool]
Effect = Callable[[Step], None]
