"""JobBrowser on every built-in store: filters, search, keyset paging, recent counts."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest

from fsm import Engine, FakeClock, Owner, open_store
from fsm.errors import BadInput
from fsm.ports import (
    MAX_RECENT_ENTRIES,
    BoundedReads,
    JobBrowser,
    ListRequest,
    RecentEntries,
    RecentRequest,
    TrailPage,
    TrailRequest,
)


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


def test_every_builtin_store_offers_recent_entries(engine: Engine) -> None:
    assert isinstance(engine.store, RecentEntries)


def test_a_recovery_entry_names_the_owner_that_lost_the_run(engine: Engine) -> None:
    # given two jobs running under two owners, and one recovered earlier (out of window)
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    early, late = Owner("host-a", 11, "aaaa1111"), Owner("host-b", 22, "bbbb2222")
    old = engine.submit("report", {})
    engine.start(old.id, engine.claim(early, ids=[old.id])[0].fence)
    engine.expire(old.id, verdict="dead", reason="pid 11 is gone")
    clock.advance(600)
    since = clock.now()
    jobs = [engine.submit("report", {"i": i}) for i in range(3)]
    for job, who in zip(jobs, (early, late, late), strict=True):
        engine.start(job.id, engine.claim(who, ids=[job.id])[0].fence)
    engine.cancel(jobs[2].id, actor="ann", reason="not needed")  # running -> cancelling

    # when their owners are judged dead, one by one
    for job in jobs:
        clock.advance(1)
        engine.expire(job.id, verdict="dead", reason="owner gone")

    # then each expire entry names the owner whose run it took back, newest first
    reads = engine.store
    assert isinstance(reads, RecentEntries)
    found = reads.recent_entries(RecentRequest(("expire",), since))
    assert [(e.job_id, e.lost_owner) for e in found] == [
        (jobs[2].id, late),
        (jobs[1].id, late),
        (jobs[0].id, early),
    ]
    assert [e.from_state for e in found] == ["cancelling", "running", "running"]
    # and the window, the events and the limit bound the read
    assert len(reads.recent_entries(RecentRequest(("expire",), 0.0))) == 4
    assert [e.job_id for e in reads.recent_entries(RecentRequest(("expire",), 0, 1))] == [
        jobs[2].id
    ]
    cancels = reads.recent_entries(RecentRequest(("cancel", "nope"), since))
    assert [(e.event, e.actor, e.lost_owner) for e in cancels] == [("cancel", "ann", None)]


def test_an_entry_written_before_recoveries_named_the_owner_reads_as_unknown() -> None:
    from fsm.records import AuditEntry

    old = AuditEntry("J1", 4, 1.0, "expire", "running", "retry_wait", 1, 1, data_json="{}")
    bad = attrs.evolve(old, data_json='{"lost_owner": {"host": "h"}}')
    assert old.lost_owner is None
    assert bad.lost_owner is None


def test_a_bad_recent_entries_request_is_refused() -> None:
    with pytest.raises(BadInput, match="events"):
        RecentRequest((), 0.0)
    with pytest.raises(BadInput, match="at a time"):
        RecentRequest(("expire",), 0.0, MAX_RECENT_ENTRIES + 1)
