"""The dashboard in a real headless Chromium against real stores with jobs in every state.

Screenshots are taken on every run; `JOBFSM_SCREENSHOTS=1` writes them into
docs/images/ (where docs/dashboard.md shows them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store
from fsm.progress import envelope

from .browser import browser, dashboard_process, screenshot
from .seed import OWNER_B, seed

TOKEN = "browser-test-token"
#: milliseconds Playwright waits for an element or a navigation
WAIT_MS = 15_000


@pytest.fixture
def seeded(sqlite_url: str) -> Iterator[tuple[str, Engine, dict[str, str]]]:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        yield sqlite_url, engine, seed(engine)
    finally:
        store.close()


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    with browser(tmp_path / "profile") as context:
        context.set_default_timeout(WAIT_MS)
        yield context


def _watch_dialogs(page: Any) -> list[str]:
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return dialogs


def test_operator_resolves_a_parked_job_in_the_browser_and_it_is_audited(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    with dashboard_process(url, "--token", TOKEN, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        dialogs = _watch_dialogs(page)
        # overview: counts per state and queue, live workers
        page.goto(base + "/")
        counts = page.locator("#counts")
        assert "payments" in counts.inner_text()
        assert page.locator("#workers").inner_text().count("worker-") == 2
        screenshot(page, "overview", tmp_path)
        # the lifecycle diagram with live counts
        page.goto(base + "/diagram")
        assert page.locator("#lifecycle svg").count() == 1
        screenshot(page, "lifecycle", tmp_path)
        # the job with a <script> payload renders it as text, and nothing runs
        page.goto(f"{base}/jobs/{ids['xss']}")
        assert "<script>window.__xss" in page.locator("#payload").inner_text()
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert "(rejected)" in page.locator("#timeline").inner_text()
        screenshot(page, "job", tmp_path)
        # log in with the token, then resolve from the investigate inbox
        page.goto(base + "/login")
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r".*/$"))
        page.goto(base + "/investigate")
        card = page.locator(f"#parked-{ids['investigate']}")
        assert "gateway timed out" in card.inner_text()
        screenshot(page, "investigate", tmp_path)
        form = card.locator("form[data-action=resolve_succeeded]")
        form.locator("input[name=actor]").fill("carol")
        form.locator("input[name=reason]").fill("gateway shows the charge captured")
        form.locator("button").click()
        page.wait_for_selector("#done")
        assert page.locator("#job-state").inner_text() == "succeeded"
        assert dialogs == []
    last = engine.history(ids["investigate"])[-1]
    assert (last.event, last.to_state, last.actor, last.reason) == (
        "resolve",
        "succeeded",
        "carol",
        "gateway shows the charge captured",
    )
    assert engine.get(ids["investigate"]).state == "succeeded"


def test_live_part_updates_without_a_reload(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, _ids = seeded
    with dashboard_process(url, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(base + "/")
        page.evaluate("window.__marker = 'same page'")
        before = page.locator("#throughput").inner_text()
        engine.cancel(engine.submit("mail.send", {}).id, actor="t", reason="live update")
        page.wait_for_function(
            "(before) => document.querySelector('#throughput').innerText !== before",
            arg=before,
            timeout=WAIT_MS,
        )
        assert page.evaluate("window.__marker") == "same page"


def test_read_only_dashboard_shows_no_action_form(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, _engine, ids = seeded
    with dashboard_process(url, "--read-only", log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(base + "/investigate")
        assert page.locator("form[data-action]").count() == 0
        assert "read-only" in page.locator("header").inner_text()
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.locator("input[name=actor]").count() == 0


def test_token_dashboard_asks_for_log_in_before_acting(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    with dashboard_process(url, "--token", TOKEN, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.locator("input[name=actor]").count() == 0
        page.goto(base + "/login")
        page.fill("input[name=token]", "not-the-token")
        page.click("button[type=submit]")
        assert "wrong token" in page.locator("main").inner_text()
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.locator("input[name=actor]").count() == 0
    assert engine.get(ids["investigate"]).state == "investigate"


@pytest.mark.postgres
def test_job_list_filters_and_pages_on_postgres(pg_url: str, chromium: Any, tmp_path: Path) -> None:
    store = open_store(pg_url)
    try:
        engine = Engine(store)
        ids = seed(engine)
        engine.submit_many([("bulk.item", {"n": i}, {"queue": "bulk"}) for i in range(120)])
    finally:
        store.close()
    with dashboard_process(pg_url, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(base + "/jobs")
        page.select_option("select[name=state]", "investigate")
        page.click(".filters button")
        page.wait_for_url(re.compile(r".*state=investigate.*"))
        listed = page.locator("#job-list tbody").inner_text()
        assert ids["investigate"] in listed
        assert ids["failed"] not in listed
        page.goto(base + "/jobs?queue=bulk")
        seen: list[str] = []
        for _ in range(5):
            seen += page.locator("#job-list tbody td.mono").all_inner_texts()
            if page.locator("#next-page").count() == 0:
                break
            page.click("#next-page")
            page.wait_for_load_state()
        assert len(seen) == 120
        assert len(set(seen)) == 120
        assert seen == sorted(seen, reverse=True)
        page.goto(base + "/jobs")
        page.fill("input[name=q]", "req-42")
        page.click(".filters button")
        page.wait_for_url(re.compile(r".*q=req-42.*"))
        assert page.locator("#job-list tbody tr").count() == 1
        screenshot(page, "jobs", tmp_path)


def test_the_job_page_shows_new_progress_without_a_reload(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    job = engine.get(ids["running"])
    with dashboard_process(url, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(f"{base}/jobs/{job.id}")
        assert page.locator("#progress").inner_text() == "\u2013"  # an en dash: none yet
        page.evaluate("window.__marker = 'same page'")
        # the owner stores progress (as its worker's heartbeat would)
        engine.save_progress(OWNER_B, {job.id: (job.fence, envelope(job, '{"done":7}', 1.0))})
        page.wait_for_function(
            "() => document.querySelector('#progress').innerText.includes('7')",
            timeout=WAIT_MS,
        )
        assert '"done": 7' in page.locator("#progress").inner_text()
        assert page.evaluate("window.__marker") == "same page"
