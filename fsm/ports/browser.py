"""Browsing: the job list and recent transition counts (the dashboard reads them), and
the bounded reads that keep a dashboard page small however big the store grows: one
page of a job's audit trail, and the oldest job of many queues in one query."""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

import attrs

from ..errors import BadInput
from ..records import AuditEntry, Job

#: the most jobs one page may hold
MAX_PAGE = 200
#: the most audit entries one trail page may hold
MAX_TRAIL_PAGE = 1000
#: the most audit entries one `recent_entries` call may return
MAX_RECENT_ENTRIES = 500
#: the most events one `recent_entries` call may name
MAX_EVENTS = 20
#: the most queues one `oldest_jobs` call may name
MAX_QUEUES = 500
#: the longest search text accepted (an idempotency key is at most 255 characters)
MAX_TEXT = 255
_ID_CHARS = re.compile(r"[0-9A-Za-z]{1,26}")


def _names(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _events(value: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class ListRequest:
    """One page of jobs, newest first (or oldest first), filtered.

    `states`, `kinds`, `queues`: None for any. `text` matches a job whose id
    starts with it, or whose idempotency key or correlation id equals it.
    `after` is the cursor of the previous page (the last id it showed): keyset
    paging on the job id, which is time-ordered, so a page costs the same at any
    depth. `limit` is 1..MAX_PAGE.
    """

    states: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    kinds: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    queues: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    text: str | None = None
    after: str | None = None
    limit: int = 50
    oldest_first: bool = False

    def __attrs_post_init__(self) -> None:
        if isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_PAGE:
            raise BadInput(f"a page holds 1 to {MAX_PAGE} jobs, got {self.limit!r}")
        if self.text is not None and not 1 <= len(self.text) <= MAX_TEXT:
            raise BadInput(f"search text must be 1-{MAX_TEXT} characters, got {len(self.text)}")
        if self.after is not None and not _ID_CHARS.fullmatch(self.after):
            raise BadInput(f"not a page cursor (a job id): {self.after[:40]!r}")

    @property
    def id_prefix(self) -> str | None:
        """The search text as a job-id prefix (ids are upper-case Crockford base 32)."""
        if self.text is None or not _ID_CHARS.fullmatch(self.text):
            return None
        return self.text.upper()


@attrs.frozen
class JobPage:
    """Jobs in list order; `next_cursor` is the `after` of the next page, None at the end."""

    jobs: tuple[Job, ...]
    next_cursor: str | None


@attrs.frozen
class TransitionCount:
    """How many audit entries with this (from, event, to, outcome) were written."""

    from_state: str | None
    event: str
    to_state: str
    outcome: str
    count: int


def page_of(jobs: list[Job], request: ListRequest) -> JobPage:
    """Cut a page from up to `limit + 1` jobs already in list order (the extra one
    only tells that a next page exists)."""
    shown = jobs[: request.limit]
    more = len(jobs) > request.limit
    return JobPage(tuple(shown), shown[-1].id if more and shown else None)


@runtime_checkable
class JobBrowser(Protocol):
    """Filtered, keyset-paged job listing and recent transition counts.

    A store that offers it implements both methods (the built-in memory, SQLite and
    PostgreSQL stores do). The dashboard's job list and throughput figures need it;
    without it those parts say so and the rest of the dashboard still works.
    """

    def list_jobs(self, request: ListRequest) -> JobPage: ...

    def recent_transitions(self, since: float) -> list[TransitionCount]:
        """Audit entries written at or after `since`, counted by (from, event, to, outcome).

        Meant for a recent window (the dashboard asks for the last hour): stores
        answer it from an index on the entry time, so its cost follows the
        window, not the whole trail.
        """
        ...


@attrs.frozen
class TrailRequest:
    """The newest `limit` entries of one job's audit trail written before the cursor
    `before` (None: the newest of all). `before` is the `older` of the page after."""

    job_id: str
    before: int | None = None
    limit: int = 500

    def __attrs_post_init__(self) -> None:
        if isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_TRAIL_PAGE:
            raise BadInput(f"a trail page holds 1 to {MAX_TRAIL_PAGE} entries, got {self.limit!r}")
        if self.before is not None and (
            isinstance(self.before, bool) or not isinstance(self.before, int) or self.before < 1
        ):
            raise BadInput(f"not a trail cursor (a positive integer): {self.before!r:.40}")


@attrs.frozen
class TrailPage:
    """Entries in the order they were written; `older` is the `before` of the page of
    entries written earlier, None when the first entry of the trail is on this page."""

    entries: tuple[AuditEntry, ...]
    older: int | None


def trail_of(entries: list[AuditEntry], request: TrailRequest) -> TrailPage:
    """Cut a page from a whole trail in write order (cursors are 1-based positions):
    for a store that keeps trails as lists, and for reading a store without
    BoundedReads."""
    end = len(entries) if request.before is None else min(request.before - 1, len(entries))
    start = max(0, end - request.limit)
    return TrailPage(tuple(entries[start:end]), start + 1 if start > 0 else None)


@runtime_checkable
class BoundedReads(Protocol):
    """Reads whose cost does not grow with a job's trail or the number of queues.

    The dashboard shows a job's trail a page at a time and the overview's oldest
    queued job per queue through these; a store without them gets the same pages
    read through `Store.history` and `JobBrowser.list_jobs` (slower, still bounded
    in what is sent). The memory, SQLite and PostgreSQL stores offer them.
    """

    def trail_page(self, request: TrailRequest) -> TrailPage:
        """One page of a job's audit trail (an unknown job has an empty trail)."""
        ...

    def oldest_jobs(self, state: str, queues: tuple[str, ...]) -> dict[str, Job]:
        """queue -> its oldest job (lowest id) in `state`, for each of `queues` that has
        one: one grouped query, at most MAX_QUEUES queues."""
        ...


@attrs.frozen
class RecentRequest:
    """The newest `limit` applied audit entries of `events` written at or after `since`
    (a recent window: the dashboard asks for the last hour's recoveries)."""

    events: tuple[str, ...] = attrs.field(converter=_events)
    since: float
    limit: int = 200

    def __attrs_post_init__(self) -> None:
        if not 1 <= len(self.events) <= MAX_EVENTS or not all(
            isinstance(e, str) and e for e in self.events
        ):
            got = f"{self.events!r:.200}"
            raise BadInput(f"recent entries name 1 to {MAX_EVENTS} events, got {got}")
        if isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_RECENT_ENTRIES:
            raise BadInput(
                f"recent entries are 1 to {MAX_RECENT_ENTRIES} at a time, got {self.limit!r}"
            )


@runtime_checkable
class RecentEntries(Protocol):
    """The newest audit entries of some events in a recent window, across every job:
    the Workers page reads the last hour's recoveries through it (each names the owner
    that lost the run, `AuditEntry.lost_owner`). Answered from an index on the entry
    time (or the write order), so the cost follows the window and the limit, not the
    trail. The memory, SQLite and PostgreSQL stores offer it."""

    def recent_entries(self, request: RecentRequest) -> list[AuditEntry]:
        """Applied entries of `request.events` written at or after `request.since`,
        newest first, at most `request.limit`."""
        ...


def check_queues(queues: tuple[str, ...]) -> tuple[str, ...]:
    """`queues` if there are at most MAX_QUEUES of them (for `oldest_jobs`)."""
    if len(queues) > MAX_QUEUES:
        raise BadInput(f"oldest_jobs names at most {MAX_QUEUES} queues, got {len(queues)}")
    return tuple(queues)
