"""JobBrowser on every built-in store: filters, search, keyset paging, recent counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, FakeClock, Owner, open_store
from fsm.errors import BadInput
from fsm.ports import BoundedReads, JobBrowser, ListRequest, TrailPage, TrailRequest


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        yield Engine(store, clock=FakeClock(1_700_000_000.0))
    finally:
        store.close()


def _fill(engine: Engine) -> list[str]:
    ids = []
    for i in range(30):
        clock = engine.clock
        assert isinstance(clock, FakeClock)
        clock.advance(1.0)
        job = engine.submit(
            "mail" if i % 2 else "report",
            {"i": i},
            queue="fast" if i % 3 == 0 else "default",
            idempotency_key=f"order-{i}",
            correlation_id=f"req-{i // 10}",
        )
        ids.append(job.id)
    return ids


def test_every_builtin_store_is_a_job_browser(engine: Engine) -> None:
    assert isinstance(engine.store, JobBrowser)


def test_pages_walk_every_job_newest_first_without_repeats(engine: Engine) -> None:
    ids = _fill(engine)
    browser = engine.store
    assert isinstance(browser, JobBrowser)
    seen: list[str] = []
    after = None
    for _ in range(10):
        page = browser.list_jobs(ListRequest(limit=7, after=after))
        seen += [j.id for j in page.jobs]
        after = page.next_cursor
        if after is None:
            break
    assert seen == sorted(ids, reverse=True)
    oldest = browser.list_jobs(ListRequest(limit=3, oldest_first=True))
    assert [j.id for j in oldest.jobs] == sorted(ids)[:3]


def test_filters_and_search_find_exactly_the_matching_jobs(engine: Engine) -> None:
    ids = _fill(engine)
    browser = engine.store
    assert isinstance(browser, JobBrowser)
    engine.cancel(ids[4], actor="ann", reason="test")

    def found(**kw: object) -> set[str]:
        return {j.id for j in browser.list_jobs(ListRequest(limit=200, **kw)).jobs}  # type: ignore[arg-type]

    assert found(states=("cancelled",)) == {ids[4]}
    assert found(kinds=("mail",), queues=("fast",)) == {
        ids[i] for i in range(30) if i % 2 and i % 3 == 0
    }
    assert found(text="order-7") == {ids[7]}
    assert found(text="req-2") == set(ids[20:])
    assert found(text=ids[5][:26]) == {ids[5]}
    assert found(text=ids[5].lower()) == {ids[5]}
    assert ids[5] in found(text=ids[5][:8])
    assert found(text="req-2", kinds=("mail",)) == {ids[i] for i in range(20, 30) if i % 2}
    assert found(text="<script>") == set()
    assert found(states=()) == set()


def test_recent_transitions_count_only_the_window(engine: Engine) -> None:
    _fill(engine)
    browser = engine.store
    assert isinstance(browser, JobBrowser)
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    cut = clock.now()
    clock.advance(10)
    owner = Owner("host", 1, "inc")
    leased = engine.claim(owner, ["default"], limit=3)
    for job in leased:
        engine.start(job.id, job.fence)
    engine.fail(leased[0].id, leased[0].fence, "boom", permanent=True)
    counts = {
        (c.from_state, c.event, c.to_state, c.outcome): c.count
        for c in browser.recent_transitions(cut + 1)
    }
    assert counts == {
        ("queued", "lease", "leased", "applied"): 3,
        ("leased", "start", "running", "applied"): 3,
        ("running", "fail", "failed", "applied"): 1,
    }
    everything = sum(c.count for c in browser.recent_transitions(0.0))
    assert everything == 30 + 7


def test_a_bad_page_request_is_refused_naming_the_field() -> None:
    with pytest.raises(BadInput, match="page holds"):
        ListRequest(limit=0)
    with pytest.raises(BadInput, match="cursor"):
        ListRequest(after="x' OR 1=1 --")


def test_every_builtin_store_offers_the_bounded_reads(engine: Engine) -> None:
    assert isinstance(engine.store, BoundedReads)


def long_trail(engine: Engine, cycles: int) -> str:
    """A job whose trail is 1 + 2 * cycles entries long (cancelled and requeued)."""
    job = engine.submit("report", {})
    for i in range(cycles):
        engine.cancel(job.id, actor="ann", reason=f"cycle {i}")
        engine.requeue(job.id, actor="ann", reason=f"cycle {i}", attempts=1)
    return job.id


def test_trail_pages_walk_the_whole_trail_newest_page_first(engine: Engine) -> None:
    # given a job whose trail is 1 + 2 * 12 entries long
    job_id = long_trail(engine, 12)
    reads = engine.store
    assert isinstance(reads, BoundedReads)
    whole = engine.history(job_id)
    # when it is read 10 entries at a time from the newest page
    pages = []
    before = None
    for _ in range(5):
        page = reads.trail_page(TrailRequest(job_id, before=before, limit=10))
        pages.append(page.entries)
        before = page.older
        if before is None:
            break
    # then each page holds at most 10 entries in write order, and together they are the trail
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [e for p in reversed(pages) for e in p] == whole
    assert reads.trail_page(TrailRequest("NOSUCHJOB")) == TrailPage((), None)


def test_oldest_jobs_names_the_oldest_of_each_queue_asked(engine: Engine) -> None:
    ids = _fill(engine)
    reads = engine.store
    assert isinstance(reads, BoundedReads)
    oldest = reads.oldest_jobs("queued", ("fast", "default", "nosuch"))
    assert {q: j.id for q, j in oldest.items()} == {"fast": ids[0], "default": ids[1]}
    assert reads.oldest_jobs("queued", ()) == {}
    with pytest.raises(BadInput, match="at most 500 queues"):
        reads.oldest_jobs("queued", tuple(f"q{i}" for i in range(501)))


@pytest.mark.parametrize("cursor", ["ABC\n", "ABC\r\n", " ABC", "ABC "])
def test_a_job_list_cursor_with_a_trailing_newline_or_space_is_refused(cursor: str) -> None:
    with pytest.raises(BadInput, match="cursor"):
        ListRequest(after=cursor)


def test_a_bad_trail_request_is_refused_naming_the_field() -> None:
    with pytest.raises(BadInput, match="trail page holds"):
        TrailRequest("J", limit=1001)
    with pytest.raises(BadInput, match="trail cursor"):
        TrailRequest("J", before=0)
