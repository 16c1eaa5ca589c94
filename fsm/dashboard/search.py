"""Search: jobs by id (prefix), correlation id or idempotency key, kind, queue, state,
error text and a time range of creation, newest first, a page at a time.

Read through the store's `JobBrowser` only (no query of its own): the id, key,
kind, queue and state filters are the store's indexed `ListRequest`; a time range is
a range of ids (ids are time-ordered: `fsm.records.first_id_at`), so it costs
nothing more; the error text, which no index holds, is matched on the jobs the
other filters select, newest first, reading at most SCAN_LIMIT of them per page.
A page that reached that bound before filling says so and continues from the last
job read. The cursor is the last job id read (keyset paging: any depth costs the
same).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import attrs
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import BadInput
from ..ports import MAX_PAGE, JobBrowser, ListRequest
from ..records import Job, first_id_at
from .actions import Pages
from .views import browser_of

#: jobs on one page of results
PAGE = 50
#: most jobs one page reads to match an error text (MAX_PAGE a read)
SCAN_LIMIT = 2000
#: longest error text searched for
MAX_ERROR_TEXT = 200
FIELDS = ("q", "kind", "queue", "state", "error", "since", "until", "after")


@attrs.frozen
class Query:
    state: str | None = None
    kind: str | None = None
    queue: str | None = None
    text: str | None = None
    error: str | None = None
    since: float | None = None
    until: float | None = None
    after: str | None = None
    limit: int = PAGE

    def request(self, after: str | None, limit: int) -> ListRequest:
        return ListRequest(
            states=None if self.state is None else (self.state,),
            kinds=None if self.kind is None else (self.kind,),
            queues=None if self.queue is None else (self.queue,),
            text=self.text,
            after=after,
            limit=limit,
        )


@attrs.frozen
class Results:
    jobs: tuple[Job, ...]
    #: the `after` of the next page (None: nothing older matches)
    next_cursor: str | None
    #: jobs read for this page
    scanned: int
    #: the page stopped at SCAN_LIMIT before filling (more may match further on)
    cut: bool


def parse_time(name: str, value: str) -> float | None:
    """A form's time (`2026-12-05T21:00`, read as UTC, or with its offset) as epoch seconds."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{name} must be a date and time like 2026-12-05T21:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def query_of(values: dict[str, str], states: tuple[str, ...]) -> Query:
    """The query a search form asks for, checked (BadInput naming the field)."""
    state = values.get("state") or None
    if state is not None and state not in states:
        raise BadInput(f"unknown state {state[:40]!r}")
    error = values.get("error") or None
    if error is not None and len(error) > MAX_ERROR_TEXT:
        raise BadInput(f"error text is at most {MAX_ERROR_TEXT} characters")
    since = parse_time("since", values.get("since", ""))
    until = parse_time("until", values.get("until", ""))
    if since is not None and until is not None and since >= until:
        raise BadInput("since must be before until")
    query = Query(
        state=state,
        kind=values.get("kind") or None,
        queue=values.get("queue") or None,
        text=values.get("q") or None,
        error=error,
        since=since,
        until=until,
        after=values.get("after") or None,
    )
    query.request(query.after, 1)  # the store's own checks of text and cursor, now
    return query


def search(browser: JobBrowser, query: Query) -> Results:
    """One page of results, newest first (see the module docstring for its bounds)."""
    after = query.after
    if query.until is not None:
        top = first_id_at(query.until)
        after = top if after is None or after > top else after
    floor = None if query.since is None else first_id_at(query.since)
    needle = None if query.error is None else query.error.casefold()
    # without an error text every job read is a hit: read the page alone (+1 to see more)
    batch = query.limit + 1 if needle is None else MAX_PAGE
    hits: list[Job] = []
    scanned = 0
    while True:
        page = browser.list_jobs(query.request(after, batch))
        for job in page.jobs:
            if floor is not None and job.id < floor:
                return Results(tuple(hits), None, scanned, False)
            if len(hits) == query.limit:
                return Results(tuple(hits), hits[-1].id, scanned, False)
            scanned += 1
            if needle is None or needle in (job.last_error or "").casefold():
                hits.append(job)
            if needle is not None and scanned >= SCAN_LIMIT:
                return Results(tuple(hits), job.id, scanned, True)
        if page.next_cursor is None:
            return Results(tuple(hits), None, scanned, False)
        after = page.next_cursor


class Search:
    """The search page."""

    def __init__(self, pages: Pages) -> None:
        self.d = pages

    def routes(self) -> list[Route]:
        return [Route("/search", self.page, name="search")]

    async def page(self, request: Request) -> Response:
        values = {k: (request.query_params.get(k) or "").strip()[:300] for k in FIELDS}
        context: dict[str, Any] = {
            "values": values,
            "results": None,
            "error": None,
            "next_query": None,
            "first_query": urlencode({k: v for k, v in values.items() if v and k != "after"}),
            "scan_limit": SCAN_LIMIT,
        }
        browser = browser_of(self.d.engine)
        if browser is None:
            context["error"] = "this store cannot list jobs (it offers no JobBrowser)"
            return self.d.page(request, "search", context, 501)
        try:
            query = query_of(values, self.d.engine.spec.states)
        except BadInput as err:
            context["error"] = str(err)
            return self.d.page(request, "search", context, 400)
        results = await run_in_threadpool(search, browser, query)
        context["results"] = results
        if results.next_cursor is not None:
            kept = {k: v for k, v in values.items() if v and k != "after"}
            context["next_query"] = urlencode({**kept, "after": results.next_cursor})
        return self.d.page(request, "search", context)
