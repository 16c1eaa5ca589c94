"""The dashboard's read helpers without a web server."""

from __future__ import annotations

import threading

from fsm import Engine, FakeClock, open_store
from fsm.dashboard import views
from fsm.display.format import capped

from .seed import seed


def test_counts_cache_answers_from_memory_and_refreshes_in_the_background() -> None:
    clock = FakeClock(1000.0)
    calls: list[int] = []
    release = threading.Event()

    def counts() -> dict[tuple[str, str], int]:
        if calls:
            assert release.wait(10)
        calls.append(1)
        return {("q", "queued"): len(calls)}

    cache = views.CountsCache(counts, ttl=5.0, now=clock.now)
    assert cache.get() == ({("q", "queued"): 1}, 1000.0)  # first call counts
    clock.advance(1.0)
    assert cache.get()[0] == {("q", "queued"): 1}  # fresh: no count
    assert len(calls) == 1
    clock.advance(5.0)
    # stale: answered at once with the old count while one refresh runs
    assert cache.get()[0] == {("q", "queued"): 1}
    assert cache.get()[0] == {("q", "queued"): 1}
    release.set()
    for _ in range(1000):
        if cache.get()[0] == {("q", "queued"): 2}:
            break
        threading.Event().wait(0.01)
    assert cache.get() == ({("q", "queued"): 2}, 1006.0)
    assert len(calls) == 2  # never two refreshes at once


def test_overview_figures_from_a_store_with_jobs_in_every_state() -> None:
    engine = Engine(open_store("memory://"))
    seed(engine)
    o = views.overview(engine)
    assert o.totals["investigate"] == 2
    assert o.finished == {"cancelled": 1, "failed": 1, "succeeded": 1}
    assert o.failure_rate == 0.5
    assert o.rejected == 1
    assert {w.owner.host: w.jobs_held for w in o.workers} == {
        "worker-a.example": 1,
        "worker-b.example": 2,
    }
    assert set(o.oldest_queued) == {"default", "reports"}


def test_payloads_are_cut_to_the_cap_and_say_so() -> None:
    shown, cut = capped('"' + "x" * 50_000 + '"', cap=100)
    assert len(shown) == 100
    assert cut
    assert capped('{"a": 1}', cap=views.PAYLOAD_CAP) == ('{\n  "a": 1\n}', False)


def test_a_job_page_shows_a_payload_over_the_cap_cut_to_it() -> None:
    # given a job whose payload is larger than a page shows
    engine = Engine(open_store("memory://"))
    job = engine.submit("big", {"blob": "x" * (views.PAYLOAD_CAP * 2)})
    # when its page is read
    view = views.job_view(engine, job.id)
    # then the payload is cut at the cap and says so; the empty result is not cut
    assert len(view.payload[0]) == views.PAYLOAD_CAP
    assert view.payload[1] is True
    assert view.result == ("", False)
