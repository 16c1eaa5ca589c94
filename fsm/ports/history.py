"""`History`: the dashboard's history charts, counted by the store over its audit trail.

One bounded request: a window of at most MAX_SPAN seconds cut into at most
MAX_BUCKETS equal buckets. The store answers with grouped counts, never entries:
applied audit entries per (bucket, queue, kind, event, to_state), and the queue
latency of first runs (the time from the run_after a job was submitted with to its
first lease, fence 1) per (bucket, queue, kind). At most MAX_ROWS groups of each are
returned (the most entries first); `truncated` says when more existed. What the
counts mean (throughput, failures, retries, recoveries) is the spec's business, decided
by the caller (`fsm.dashboard.history`), not the store's.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from ..errors import BadInput

#: longest window (seconds): two days
MAX_SPAN = 2 * 86400.0
#: most buckets in one window
MAX_BUCKETS = 288
#: most groups of each kind a store returns
MAX_ROWS = 5000


@attrs.frozen
class HistoryRequest:
    """[since, until) cut into buckets of `bucket` seconds; `lease_event` names the event
    whose first occurrence (fence 1) ends a job's queue latency."""

    since: float
    until: float
    bucket: float
    lease_event: str = "lease"

    def __attrs_post_init__(self) -> None:
        span = self.until - self.since
        if not span > 0:
            raise BadInput(f"a history window must end after it starts, got {span!r} s")
        if span > MAX_SPAN:
            raise BadInput(f"a history window is at most {MAX_SPAN:.0f} s, got {span:.0f} s")
        if not self.bucket > 0 or span / self.bucket > MAX_BUCKETS:
            raise BadInput(
                f"a history window has at most {MAX_BUCKETS} buckets, got bucket {self.bucket!r} s"
            )

    @property
    def buckets(self) -> int:
        """How many buckets the window has (the last may be cut short)."""
        n = (self.until - self.since) / self.bucket
        return int(n) + (0 if n == int(n) else 1)

    def bucket_of(self, at: float) -> int:
        return int((at - self.since) // self.bucket)


@attrs.frozen
class EventCount:
    """Applied audit entries of one (bucket, queue, kind, event, to_state)."""

    bucket: int
    queue: str
    kind: str
    event: str
    to_state: str
    count: int


@attrs.frozen
class LatencyCount:
    """First leases of one (bucket, queue, kind): how many, and their queue latency
    (seconds from the submitted run_after to the lease) summed and at most."""

    bucket: int
    queue: str
    kind: str
    count: int
    total: float
    longest: float


@attrs.frozen
class HistoryCounts:
    events: tuple[EventCount, ...]
    latency: tuple[LatencyCount, ...]
    truncated: bool = False


@runtime_checkable
class History(Protocol):
    """Grouped counts of the audit trail over a bounded window (memory, SQLite and
    PostgreSQL offer it). Read-only: it changes nothing."""

    def history_counts(self, request: HistoryRequest) -> HistoryCounts: ...


def cut(
    events: list[EventCount], latency: list[LatencyCount], limit: int = MAX_ROWS
) -> HistoryCounts:
    """At most `limit` groups of each, the largest counts first (ties by key)."""
    events.sort(key=lambda r: (-r.count, r.bucket, r.queue, r.kind, r.event, r.to_state))
    latency.sort(key=lambda r: (-r.count, r.bucket, r.queue, r.kind))
    truncated = len(events) > limit or len(latency) > limit
    return HistoryCounts(tuple(events[:limit]), tuple(latency[:limit]), truncated)
