"""The Workers page after a real worker process is killed with SIGKILL on SQLite: the
recovery names the owner that lost the run, and the page lists that recovery under it
with the kinds each live worker handles (its scheduler's beat), in headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store
from fsm.ports import HoldsSchedules
from tests.integration.worker.helpers import Workers, markers, wait_for

from .browser import browser_context, dashboard_process, screenshot, token_file
from .clients import TOKENS

WAIT_MS = 15_000


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(tmp_path)
    try:
        yield workers
    finally:
        workers.close()


def test_a_killed_workers_recovery_is_listed_under_it_on_the_workers_page(
    sqlite_url: str, pool: Workers, chromium_process: Any, tmp_path: Path
) -> None:
    # given worker A running a retry-safe job, and worker B idle beside it (lease TTL
    # 30 s: only the confirmed death of A's pid recovers the job quickly)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = open_store(sqlite_url)
    engine = Engine(store)
    try:
        job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
        a = pool.start(sqlite_url, ttl=30.0)
        wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
        lost = engine.get(job.id).owner
        assert lost is not None
        assert lost.pid == a.pid
        b = pool.start(sqlite_url, ttl=30.0)
        pool.wait_serving(b)

        # when A is killed with SIGKILL and B takes its job back and reruns it
        pool.kill9(a)
        wait_for(lambda: engine.get(job.id).state == "succeeded", 20, "B to rerun the job")

        # then the recovery's audit entry names A, the owner that lost the run
        (expired,) = [e for e in engine.history(job.id) if e.event == "expire"]
        assert expired.lost_owner == lost
        assert expired.data["lost_owner"]["pid"] == a.pid
        # and B's scheduler told the store the kinds it handles
        assert isinstance(store, HoldsSchedules)
        wait_for(lambda: len(store.schedulers()) >= 2, 20, "both workers' beats")
        handles = {beat.owner: beat.kinds for beat in store.schedulers()}
        assert "sleep" in handles[str(lost)]
    finally:
        store.close()

    # and the Workers page lists the recovery under A, and B among the live workers
    tokens = token_file(tmp_path, TOKENS)
    with (
        dashboard_process(
            sqlite_url, "--token-file", str(tokens), log=tmp_path / "dash.log"
        ) as base,
        browser_context(chromium_process) as context,
    ):
        context.set_default_timeout(WAIT_MS)
        page: Any = context.new_page()
        page.goto(base + "/login")
        page.fill("input[name=token]", TOKENS["carol"])
        page.click("#login button[type=submit]")
        page.wait_for_selector("#operator")
        page.goto(base + "/workers")
        group = page.locator(f"#lost-{lost.incarnation}")
        text = group.inner_text()
        assert f"pid {a.pid}" in text
        assert "holds no lease now" in text
        assert "confirmed dead" in text
        assert group.locator(".lost-count").inner_text() == "1"
        row = group.locator("table.lost-runs tbody tr")
        assert row.count() == 1
        assert job.id in row.inner_text()
        assert "running" in row.inner_text()
        assert "retry_wait" in row.inner_text()
        assert group.locator(f"a[href$='/jobs/{job.id}']").count() == 1
        idle = page.locator("#idle-workers").inner_text()
        assert f"pid {b.pid}" in idle
        assert "sleep" in idle
        assert f"pid {a.pid}/" not in idle  # its beat is older than its death
        screenshot(page, "workers-recovery", tmp_path)
