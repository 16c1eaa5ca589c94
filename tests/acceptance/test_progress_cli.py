"""`jobfsm inspect` shows a running job's latest progress, as text and as JSON."""

from __future__ import annotations

from fsm import Engine, Owner, open_store
from fsm.service.progress import envelope

from ._cli import ok_here, ok_json_here


def test_inspect_shows_the_latest_progress_with_its_attempt(sqlite_url: str) -> None:
    # given: a running job whose owner stored progress, and a queued job without any
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        owner = Owner("worker.example", 4101, "a1b2c3d4")
        job = engine.submit("report.build", {"month": "2026-11"})
        waiting = engine.submit("report.build", {"month": "2026-12"})
        (leased,) = engine.claim(owner, limit=1, ids=[job.id])
        running = engine.start(job.id, leased.fence)
        stored = envelope(running, '{"done":40,"of":100}', 1767225600.0)
        assert engine.save_progress(owner, {job.id: (running.fence, stored)}) == [job.id]
    finally:
        store.close()

    # when
    text = ok_here("inspect", job.id, "--store", sqlite_url)
    data = ok_json_here("inspect", job.id, "--store", sqlite_url)
    none = ok_json_here("inspect", waiting.id, "--store", sqlite_url)

    # then
    line = '{"done": 40, "of": 100} (attempt 1, 2026-01-01 00:00:00.000Z)'
    assert f"progress: {line}" in text
    assert data["job"]["progress"] == {
        "value": {"done": 40, "of": 100},
        "attempt": 1,
        "fence": running.fence,
        "at": 1767225600.0,
    }
    assert "progress_json" not in data["job"]
    assert none["job"]["progress"] is None
