"""Pages stay bounded whatever the store holds (issue 32 item 4): a job page shows at most
TRAIL_PAGE audit entries with a link to older ones, the overview lists TOP_QUEUES queues
and reads their oldest jobs in one grouped query, the investigate inbox never reads a
whole trail, and diagrams are drawn once per key by a bounded pool. The figures (time,
bytes at 100k entries and 10k queues) are benchmarks/dashboard_bounds.py's."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fsm import Engine, Owner, open_store
from fsm.dashboard import views, workers_view
from fsm.dashboard.render import Renderer

from .clients import operator
from .test_browse import long_trail


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    store = open_store(sqlite_url)
    try:
        yield Engine(store)
    finally:
        store.close()


def _rows(html: str) -> int:
    body = html.split('<table id="timeline">', 1)[1].split("</table>", 1)[0]
    return body.count("<tr") - 1  # less the header row


def test_a_job_page_shows_500_entries_and_links_to_older_ones(engine: Engine) -> None:
    # given a job with a trail of 1 + 2 * 600 = 1,201 entries
    job_id = long_trail(engine, 600)
    c = operator(engine)
    # when its page is read, then the older pages by their links
    first = c.get(f"/jobs/{job_id}").text
    older = re.search(r'id="trail-older" href="([^"]+)"', first)
    assert older is not None
    second = c.get(older.group(1).replace("&amp;", "&")).text
    oldest_link = re.search(r'id="trail-older" href="([^"]+)"', second)
    assert oldest_link is not None
    third = c.get(oldest_link.group(1).replace("&amp;", "&")).text
    # then 500, 500 and 201 entries, the last page without an older link
    assert [_rows(first), _rows(second), _rows(third)] == [500, 500, 201]
    assert 'id="trail-older"' not in third
    assert 'id="trail-newest"' in third
    assert c.get(f"/jobs/{job_id}?before=x").status_code == 400
    assert c.get(f"/jobs/{job_id}?before=0").status_code == 400


def test_a_job_page_of_long_texts_stays_under_a_megabyte(engine: Engine) -> None:
    # given 600 operator entries each with the longest reason the engine takes
    reason = "r" * 1000
    job = engine.submit("report", {})
    for _ in range(300):
        engine.cancel(job.id, actor="a" * 1000, reason=reason)
        engine.requeue(job.id, actor="a" * 1000, reason=reason, attempts=1)
    page = operator(engine).get(f"/jobs/{job.id}")
    # then the page holds 500 entries, each text cut, in well under 1 MB
    assert _rows(page.text) == 500
    assert len(page.content) < 1_000_000
    assert "r" * 200 not in page.text


def _counting(store: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(store, name)

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(store, name, counted)
    return calls


def test_the_overview_of_many_queues_lists_the_top_ones_from_one_grouped_query(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given 300 queues, each with queued jobs (queue q000 the fullest)
    engine.submit_many(
        [("k", {}, {"queue": f"q{i:03d}"}) for i in range(300) for _ in range(1 + (i == 0) * 5)]
    )
    oldest = _counting(engine.store, "oldest_jobs", monkeypatch)
    listed = _counting(engine.store, "list_jobs", monkeypatch)
    # when the overview is read
    page = operator(engine).get("/").text
    # then the oldest queued jobs came from one grouped query, not one per queue
    assert len(oldest) == 1
    assert len(oldest[0][1]) == views.TOP_QUEUES
    assert listed == []
    # and the table lists TOP_QUEUES queues and one row for the other 250
    table = page.split('id="counts"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") + table.count("<tr ") == 1 + views.TOP_QUEUES + 1 + 1
    assert "250 more queues" in table
    assert ">q000<" in table


def test_the_investigate_inbox_reads_a_few_entries_of_each_parked_job(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a parked job with a long trail
    owner = Owner("host", 1, "inc")
    job_id = long_trail(engine, 100)
    (leased,) = engine.claim(owner, ids=[job_id])
    engine.start(job_id, leased.fence)
    engine.ambiguous(job_id, leased.fence, "gateway timed out")
    pages = _counting(engine.store, "trail_page", monkeypatch)

    def whole(job_id: str) -> Any:
        raise AssertionError("the inbox read a whole trail")

    monkeypatch.setattr(engine.store, "history", whole)
    # when the inbox is read
    page = operator(engine).get("/investigate").text
    # then the parking entry was found among the newest PARKED_TRAIL entries
    assert "gateway timed out" in page
    assert [p[0].limit for p in pages] == [views.PARKED_TRAIL]


def test_one_drawing_per_key_however_many_ask_at_once() -> None:
    drawn: list[str] = []
    gate = threading.Event()

    def draw(dot: str) -> tuple[str | None, str | None]:
        gate.wait(5)
        drawn.append(dot)
        return f"<svg>{dot}</svg>", None

    renderer = Renderer(draw, workers=2)
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(renderer.svg(("job", "A", 3), lambda: "A")))
        for _ in range(20)
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert drawn == ["A"]
    assert results == [("<svg>A</svg>", None)] * 20
    assert renderer.svg(("job", "A", 4), lambda: "A4") == ("<svg>A4</svg>", None)
    assert renderer.drawn == 2


def test_at_most_two_drawings_run_at_once_and_a_full_pool_says_so() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def draw(dot: str) -> tuple[str | None, str | None]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(5)
        with lock:
            running -= 1
        return dot, None

    renderer = Renderer(draw, workers=2, wait=0.5)
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(renderer.svg(i, lambda: "x")))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)  # past `wait`: the six without a slot give up
    release.set()
    for t in threads:
        t.join(10)
    assert most == 2
    busy = [r for r in results if r[0] is None]
    assert len(busy) == 6
    assert all("busy" in r[1] for r in busy)


def test_refreshing_a_job_page_draws_its_path_once_per_version(engine: Engine) -> None:
    job = engine.submit("report", {})
    c = operator(engine)
    renderer = c.app.state.dashboard.renderer  # type: ignore[attr-defined]
    for _ in range(5):
        c.get(f"/jobs/{job.id}", headers={"X-Jobfsm-Fragment": "1"})
    assert renderer.drawn == 1
    engine.cancel(job.id, actor="a", reason="b")  # a new version: a new path
    for _ in range(5):
        c.get(f"/jobs/{job.id}", headers={"X-Jobfsm-Fragment": "1"})
    for _ in range(5):
        c.get("/diagram", headers={"X-Jobfsm-Fragment": "1"})  # one count snapshot
    assert renderer.drawn == 3


def test_the_workers_page_reads_the_newest_recoveries_once_and_shows_ten_per_owner(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given 233 runs taken back in the last hour from two dead owners
    lost, other = Owner("host-x", 7, "dead0000dead0000"), Owner("host-y", 8, "dead1111dead1111")
    jobs = engine.submit_many([("report", {"i": i}, {}) for i in range(233)])
    for i, job in enumerate(jobs):
        engine.claim(lost if i % 2 else other, ids=[job.id])
        engine.expire(job.id, verdict="dead", reason="gone")
    calls = _counting(engine.store, "recent_entries", monkeypatch)
    # when the workers page is read
    html = operator(engine).get("/workers").text
    # then one read of at most RECOVERY_ROWS entries of expire, said to be cut
    (request,) = [args[0] for args in calls]
    assert (request.events, request.limit) == (("expire",), workers_view.RECOVERY_ROWS)
    assert "Only the newest recoveries of the hour were read." in html
    # and each owner's group shows its newest PER_OWNER of the 100 read of it
    groups = html.split('<div class="lost" id="lost-')[1:]
    assert sorted(g.split('"', 1)[0] for g in groups) == sorted(
        [lost.incarnation, other.incarnation]
    )
    for group in groups:
        table = group.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
        assert table.count("<tr>") == workers_view.PER_OWNER
        assert '<strong class="lost-count">100</strong>' in group
