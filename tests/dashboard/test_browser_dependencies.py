"""A job page's dependencies (issue 35 item 4) in a real headless Chromium against a
real SQLite file: a waiting job names the prerequisites it waits for, with their
states; a prerequisite lists its dependents; once it succeeds, the release shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsm import Engine, Owner, open_store

from .browser import browser_context, dashboard_process, screenshot, token_file
from .clients import TOKENS

WAIT_MS = 15_000
OWNER = Owner("deps.example", 11, "d1d2d3d4d5d6d7d8")


def test_a_waiting_job_says_what_it_waits_for_and_a_prerequisite_lists_its_dependents(
    sqlite_url: str, chromium_process: Any, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        extract = engine.submit("etl.extract", {"day": "2026-12-05"})
        clean = engine.submit("etl.clean", {"day": "2026-12-05"})
        load = engine.submit("etl.load", {}, after=[extract.id, clean.id])
        report = engine.submit("etl.report", {}, after=[load.id])
        (leased,) = engine.claim(OWNER, ["default"], limit=1, ids=[clean.id])
        engine.start(clean.id, leased.fence)
        engine.succeed(clean.id, leased.fence)
        assert engine.get(load.id).state == "waiting"
        tokens = token_file(tmp_path, TOKENS)
        with (
            dashboard_process(sqlite_url, "--token-file", str(tokens), log=tmp_path / "d") as base,
            browser_context(chromium_process) as context,
        ):
            context.set_default_timeout(WAIT_MS)
            page = context.new_page()
            page.goto(base + "/login")
            page.fill("input[name=token]", TOKENS["carol"])
            page.click("#login button[type=submit]")
            page.wait_for_selector("#operator")
            # the waiting job: what it waits for, each prerequisite with its state
            page.goto(f"{base}/jobs/{load.id}")
            waits = page.locator("#waits-for").inner_text()
            assert "Waiting for 1 of 2 prerequisites" in waits
            assert f"{extract.id} (queued)" in waits
            assert clean.id not in waits
            rows = page.locator("#prerequisites tbody tr")
            assert rows.count() == 2
            text = page.locator("#prerequisites").inner_text()
            assert f"{extract.id}\tetl.extract\tqueued\twaiting for it" in text
            assert f"{clean.id}\tetl.clean\tsucceeded\tdone" in text
            assert page.locator("#dependents").inner_text().count(report.id) == 1
            screenshot(page, "dependencies", tmp_path)
            # the prerequisite lists the job that waits for it
            page.goto(f"{base}/jobs/{extract.id}")
            assert f"{load.id}\tetl.load\twaiting" in page.locator("#dependents").inner_text()
            assert page.locator("#waits-for").count() == 0
            # it succeeds: the dependent is released and says no more that it waits
            (leased,) = engine.claim(OWNER, ["default"], limit=1, ids=[extract.id])
            engine.start(extract.id, leased.fence)
            engine.succeed(extract.id, leased.fence)
            page.goto(f"{base}/jobs/{load.id}")
            assert page.locator("#job-state").inner_text() == "queued"
            assert page.locator("#waits-for").count() == 0
            assert page.locator("#prerequisites tr[data-verdict=succeeded]").count() == 2
            # a job with neither shows no dependencies section
            other = engine.submit("mail.send", {})
            page.goto(f"{base}/jobs/{other.id}")
            assert page.locator("#dependencies").count() == 0
    finally:
        store.close()
