"""The dashboard's search (fsm.dashboard.search) over every built-in store's JobBrowser:
each field, a time range as an id range, error text with its read bound, keyset
pages newest first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, FakeClock, Owner, open_store
from fsm.dashboard import search as s
from fsm.errors import BadInput
from fsm.ports import JobBrowser
from fsm.records import first_id_at, new_id

T0 = 1_700_000_000.0
OWNER = Owner("host.example", 7, "0123456789abcdef")
STATES = ("queued", "failed", "succeeded")


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
        yield Engine(store, clock=FakeClock(T0))
    finally:
        store.close()


def _browser(engine: Engine) -> JobBrowser:
    store = engine.store
    assert isinstance(store, JobBrowser)
    return store


def _fill(engine: Engine) -> list[str]:
    """120 jobs one second apart; every 10th failed with 'SMTP 550 mailbox i', the rest
    queued; ids in creation order."""
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    ids = []
    for i in range(120):
        clock.advance(1.0)
        job = engine.submit(
            "mail" if i % 2 else "report",
            {"i": i},
            queue="fast" if i % 3 == 0 else "default",
            idempotency_key=f"order-{i}",
            correlation_id=f"req-{i // 10}",
        )
        if i % 10 == 0:
            (leased,) = engine.claim(OWNER, [job.queue], ids=[job.id])
            engine.start(job.id, leased.fence)
            engine.fail(job.id, leased.fence, f"SMTP 550 mailbox {i}", permanent=True)
        ids.append(job.id)
    return ids


def _all_pages(browser: JobBrowser, values: dict[str, str]) -> list[str]:
    seen: list[str] = []
    after = ""
    for _ in range(20):
        results = s.search(browser, s.query_of({**values, "after": after}, STATES))
        seen += [j.id for j in results.jobs]
        if results.next_cursor is None:
            return seen
        after = results.next_cursor
    raise AssertionError("more pages than jobs")


def test_the_first_id_of_an_instant_bounds_every_id_made_then(engine: Engine) -> None:
    assert new_id(T0) >= first_id_at(T0) > new_id(T0 - 0.001)
    assert first_id_at(T0 + 0.001) > new_id(T0)


def test_fields_select_newest_first_and_pages_hold_every_match_once(engine: Engine) -> None:
    ids = _fill(engine)
    b = _browser(engine)
    assert _all_pages(b, {}) == ids[::-1]  # 120 jobs: three pages of 50
    first = s.search(b, s.query_of({}, STATES))
    assert len(first.jobs) == s.PAGE
    assert first.next_cursor == ids[-50]
    assert _all_pages(b, {"q": "order-7"}) == [ids[7]]
    assert _all_pages(b, {"q": "req-3"}) == ids[30:40][::-1]
    assert _all_pages(b, {"q": ids[5]}) == [ids[5]]
    fast_mail = [x for i, x in enumerate(ids) if i % 3 == 0 and i % 2]
    assert _all_pages(b, {"kind": "mail", "queue": "fast"}) == fast_mail[::-1]
    failed = ids[::10]
    assert _all_pages(b, {"state": "failed"}) == failed[::-1]


def test_a_time_range_is_an_id_range(engine: Engine) -> None:
    ids = _fill(engine)  # job i was created at T0 + i + 1
    b = _browser(engine)
    since, until = "2023-11-14T22:14:00", "2023-11-14T22:14:30"  # T0 + 40 .. T0 + 70
    assert _all_pages(b, {"since": since, "until": until}) == ids[39:69][::-1]
    assert _all_pages(b, {"since": since, "until": until, "state": "failed"}) == [
        ids[60],
        ids[50],
        ids[40],
    ]
    assert _all_pages(b, {"until": "2023-11-14T22:13:21"}) == []


def test_error_text_matches_case_blind_and_a_page_reads_at_most_scan_limit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _fill(engine)
    b = _browser(engine)
    assert _all_pages(b, {"error": "smtp 550 MAILBOX 11"}) == [ids[110]]
    assert _all_pages(b, {"error": "mailbox"}) == ids[::10][::-1]
    # with a bound of 30 jobs read a page, a page that did not fill says so and the
    # next one continues where it stopped: every match is still found, once
    monkeypatch.setattr(s, "SCAN_LIMIT", 30)
    first = s.search(b, s.query_of({"error": "mailbox 1"}, STATES))
    assert first.cut
    assert first.scanned == 30
    assert [j.id for j in first.jobs] == [ids[110], ids[100]]
    assert _all_pages(b, {"error": "mailbox 1"}) == [ids[110], ids[100], ids[10]]


def test_bad_input_is_named() -> None:
    for values, what in (
        ({"state": "nope"}, "unknown state"),
        ({"since": "yesterday"}, "since must be"),
        ({"since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}, "before until"),
        ({"error": "x" * 201}, "at most 200"),
        ({"after": "not a cursor!"}, "cursor"),
        ({"q": "x" * 256}, "1-255"),
    ):
        with pytest.raises(BadInput, match=what):
            s.query_of(values, STATES)
