"""The job page shows a running job's latest progress (stored by its owner), escaped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, open_store
from fsm.service.progress import envelope

from .clients import operator
from .seed import OWNER_B, XSS, seed


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    store = open_store(sqlite_url)
    try:
        yield Engine(store)
    finally:
        store.close()


def test_the_job_page_shows_the_latest_progress_with_its_attempt(engine: Engine) -> None:
    # given: a running job whose owner stored progress (with script text in it)
    ids = seed(engine)
    job = engine.get(ids["running"])
    value = f'{{"done": 40, "of": 100, "note": "{XSS.replace(chr(39), "")}"}}'
    engine.save_progress(OWNER_B, {job.id: (job.fence, envelope(job, value, 1767225600.0))})

    # when
    c = operator(engine)
    shown = c.get(f"/jobs/{job.id}").text
    other = c.get(f"/jobs/{ids['queued']}").text

    # then: the value, its attempt and time; inert; a job without progress shows none
    assert '<td id="progress">' in shown
    assert "&#34;done&#34;: 40" in shown
    assert "attempt 1 · 2026-01-01 00:00:00.000Z" in shown
    assert "<script>window.__xss" not in shown
    assert '<td id="progress">\u2013</td>' in other  # an en dash: none
