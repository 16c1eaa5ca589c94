"""The History page (issue 35 item 3) in a real headless Chromium against a real SQLite
file: each chart's bars add up to what the audit trails hold for the same window, per
queue when filtered. `JOBFSM_SCREENSHOTS=1` writes the screenshot into docs/images/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store
from fsm.dashboard.history import classify, window_of
from fsm.ports import ListRequest

from .browser import browser_context, dashboard_process, screenshot, token_file
from .clients import TOKENS
from .seed import seed

WAIT_MS = 15_000


@pytest.fixture
def seeded(sqlite_url: str) -> Iterator[tuple[str, Engine]]:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        seed(engine)
        yield sqlite_url, engine
    finally:
        store.close()


def _expected(engine: Engine, queue: str | None = None) -> dict[str, int]:
    """Each series' count over the page's window, read from every job's whole trail."""
    _label, request = window_of("1h", engine.clock.now())
    series = classify(engine.spec)
    out = {"finished": 0, "failed": 0, "retries": 0, "recoveries": 0}
    jobs = engine.store.list_jobs(ListRequest(limit=200)).jobs  # type: ignore[attr-defined]
    for job in jobs:
        if queue and job.queue != queue:
            continue
        for e in engine.history(job.id):
            if e.outcome == "applied" and request.since <= e.at < request.until:
                for name in series.get((e.event, e.to_state), ()):
                    out[name] += 1
    return out


def _drawn(page: Any, key: str) -> int:
    return int(
        page.locator(f"#chart-{key}").evaluate(
            "el => Array.from(el.querySelectorAll('rect.bar'))"
            ".reduce((n, r) => n + Number(r.dataset.value), 0)"
        )
    )


def test_the_charts_add_up_to_the_audit_trails_of_the_window(
    seeded: tuple[str, Engine], chromium_process: Any, tmp_path: Path
) -> None:
    url, engine = seeded
    expected = _expected(engine)
    assert expected["finished"] >= 3  # the seed finished jobs in each terminal state
    assert expected["failed"] >= 1
    assert expected["retries"] >= 1
    tokens = token_file(tmp_path, TOKENS)
    with (
        dashboard_process(url, "--token-file", str(tokens), log=tmp_path / "d.log") as base,
        browser_context(chromium_process) as context,
    ):
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        page.goto(base + "/login")
        page.fill("input[name=token]", TOKENS["carol"])
        page.click("#login button[type=submit]")
        page.wait_for_selector("#operator")
        page.click("nav a:text('History')")
        page.wait_for_selector("#chart-finished")
        for key, n in expected.items():
            assert _drawn(page, key) == n, key
        # first runs: every job leased at least once, one latency sample each
        first_runs = sum(
            int(cell) for cell in page.locator("#history-table td:nth-child(7)").all_inner_texts()
        )
        leased = sum(
            1
            for job in engine.store.list_jobs(ListRequest(limit=200)).jobs  # type: ignore[attr-defined]
            if job.fence >= 1
        )
        assert first_runs == leased
        screenshot(page, "history", tmp_path)
        # one queue: the charts count only its jobs
        page.fill("input[name=queue]", "payments")
        page.click("#history-form button")
        page.wait_for_url("**queue=payments**")
        for key, n in _expected(engine, "payments").items():
            assert _drawn(page, key) == n, key
        assert page.locator("#history-table tbody tr").count() == 1
        assert page.goto(base + "/history?window=1y").status == 400
