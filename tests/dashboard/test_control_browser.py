"""The control pages (queues, limits, schedules, bulk actions, the inbox set resolve) in a real
headless Chromium against a real SQLite store: each control's effect is asserted on
the store, and its audit under the logged-in operator's name.

`JOBFSM_SCREENSHOTS=1` writes the screenshots into docs/images/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, Owner, open_store
from fsm.ports import HoldsSchedules, ScanRequest, SchedulerBeat
from fsm.service.schedules import Schedules, schedule

from .browser import browser_context, dashboard_process, screenshot, token_file
from .clients import TOKENS
from .seed import OWNER_A, OWNER_B, seed

WAIT_MS = 15_000
#: a bulk action of 1,000 jobs is 1,000 engine transactions: give its answer time
BULK_WAIT_MS = 120_000
PROBE = Owner("probe.example", 9, "c0ffee00c0ffee00")


@pytest.fixture
def seeded(sqlite_url: str) -> Iterator[tuple[str, Engine, dict[str, str]]]:
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        yield sqlite_url, engine, seed(engine)
    finally:
        store.close()


@pytest.fixture
def chromium(chromium_process: Any) -> Iterator[Any]:
    with browser_context(chromium_process) as context:
        context.set_default_timeout(WAIT_MS)
        yield context


def _dashboard(url: str, tmp_path: Path) -> Any:
    tokens = token_file(tmp_path, TOKENS)
    return dashboard_process(url, "--token-file", str(tokens), log=tmp_path / "dash.log")


def _log_in(page: Any, base: str, name: str = "carol") -> None:
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKENS[name])
    page.click("#login button[type=submit]")
    page.wait_for_selector("#operator")


def _fresh_claim(url: str, queue: str) -> list[str]:
    """What a worker that starts now (its own engine, nothing cached) leases of `queue`."""
    store = open_store(url)
    try:
        return [j.id for j in Engine(store).claim(PROBE, [queue], limit=1)]
    finally:
        store.close()


def test_a_pause_from_the_page_stops_leases_and_shows_everywhere(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/queues")
        form = page.locator("form[data-queue=reports]")
        form.locator("input[name=reason]").fill("report builder is being redeployed")
        form.locator("button").click()
        page.wait_for_selector("#done")
        # the pause is in the store, under the operator's name
        pause = engine.paused()["reports"]
        assert (pause.actor, pause.reason) == ("carol", "report builder is being redeployed")
        # a worker leases nothing of the paused queue, while another queue still leases
        assert _fresh_claim(url, "reports") == []
        # the badge shows wherever the queue appears: queues, overview, job list, job page
        assert page.locator("#queue-reports [data-paused=reports]").count() == 1
        screenshot(page, "queues", tmp_path)
        page.goto(base + "/")
        assert page.locator("#counts [data-paused=reports]").count() == 1
        page.goto(base + "/jobs?queue=reports")
        assert page.locator("#job-list [data-paused=reports]").count() >= 1
        page.goto(f"{base}/jobs/{ids['running']}")
        assert page.locator("[data-paused=reports]").count() == 1
        # resumed from the page: the queue leases again
        page.goto(base + "/queues")
        form = page.locator("form[data-queue=reports]")
        assert form.locator("button").inner_text() == "resume"
        form.locator("input[name=reason]").fill("redeployed")
        form.locator("button").click()
        page.wait_for_selector("#done")
        assert "reports" not in engine.paused()
        assert len(_fresh_claim(url, "reports")) == 1


def test_schedules_page_lists_disables_and_triggers_through_the_service(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, _ids = seeded
    keeper = Schedules(engine)
    keeper.add(
        schedule("nightly-report", "report.build", cron="0 3 * * *", queue="reports"),
        actor="alice",
        reason="monthly close",
    )
    keeper.add(schedule("mail-digest", "mail.send", every=900), actor="alice", reason="digest")
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/schedules")
        row = page.locator("#schedule-nightly-report")
        assert "cron 0 3 * * * (UTC)" in row.inner_text()
        assert "03:00:00" in row.inner_text()  # the next tick
        # disable: the service's pause, audited as carol
        form = page.locator("form[data-schedule=nightly-report]")
        form.locator("select[name=action]").select_option("pause")
        form.locator("input[name=reason]").fill("month closed early")
        form.locator("button").click()
        page.wait_for_selector("#done")
        record = next(r for r in keeper.list() if r.record.name == "nightly-report").record
        assert record.paused
        change = keeper.changes("nightly-report", limit=1)[0]
        assert (change.action, change.actor, change.reason) == (
            "paused",
            "carol",
            "month closed early",
        )
        assert "disabled" in page.locator("#schedule-nightly-report").inner_text()
        # trigger now: one job of the schedule's kind and queue, linked from the answer
        form = page.locator("form[data-schedule=mail-digest]")
        form.locator("select[name=action]").select_option("trigger")
        form.locator("input[name=reason]").fill("digest wanted before the meeting")
        form.locator("button").click()
        page.wait_for_selector("#done a")
        job_id = page.locator("#done a").inner_text()
        job = engine.get(job_id)
        assert (job.kind, job.queue, job.state) == ("mail.send", "default", "queued")
        assert job.idempotency_key is not None
        assert job.idempotency_key.startswith("schedule:mail-digest:")
        trigger = keeper.changes("mail-digest", limit=1)[0]
        assert (trigger.action, trigger.actor, trigger.reason) == (
            "triggered",
            "carol",
            "digest wanted before the meeting",
        )
        screenshot(page, "schedules", tmp_path)


def _failed_jobs(engine: Engine, n: int, queue: str) -> list[str]:
    """`n` jobs that failed for good, run as a worker would (claim-and-start, one report
    write per batch)."""
    engine.submit_many([("mail.send", {"n": i}, {"queue": queue}) for i in range(n)])
    ids: list[str] = []
    while jobs := engine.claim(PROBE, [queue], limit=200, start=lambda j: {}):
        reports = [
            (j, "fail", {"fence": j.fence, "error": "SMTP 550", "permanent": True}) for j in jobs
        ]
        engine.report_many(reports)
        ids += [j.id for j in jobs]
    return ids


def test_a_bulk_requeue_of_1000_failed_jobs_audits_1000_entries_as_the_operator(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    failed = _failed_jobs(engine, 1000, "bulk")
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/bulk")
        page.select_option("#bulk-filter select[name=action]", "requeue")
        page.select_option("#bulk-filter select[name=state]", "failed")
        page.fill("#bulk-filter input[name=queue]", "bulk")
        page.click("#bulk-filter button")
        page.wait_for_selector("#preview")
        assert page.locator("#preview-count").inner_text() == "1000"
        screenshot(page, "bulk", tmp_path)
        confirm = page.locator("#bulk-confirm")
        confirm.locator("input[name=reason]").fill("SMTP relay fixed")
        confirm.locator("button").click()
        page.wait_for_selector("#outcome", timeout=BULK_WAIT_MS)
        assert page.locator("#outcome-done").inner_text() == "1000"
        assert page.locator("#outcome-failed").inner_text() == "0"
    # every job has exactly one requeue entry, by carol with the one reason
    requeues = [e for job_id in failed for e in engine.history(job_id) if e.event == "requeue"]
    assert len(requeues) == 1000
    assert {(e.actor, e.reason, e.to_state) for e in requeues} == {
        ("carol", "SMTP relay fixed", "queued")
    }
    # the failed job of another queue was not selected
    assert engine.get(ids["failed"]).state == "failed"


def test_the_inbox_has_one_form_per_job_and_resolves_a_ticked_set(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    parked = [ids["investigate"], ids["investigate2"]]
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/investigate")
        for job_id in parked:
            card = page.locator(f"#parked-{job_id}")
            assert card.locator("form").count() == 1
            assert card.locator("input[name=reason]").count() == 1
            assert "reason code" in card.inner_text()
            card.locator("input[type=checkbox]").check()
        form = page.locator("#resolve-set")
        form.locator("select[name=action]").select_option("resolve_failed")
        form.locator("input[name=reason]").fill("gateway shows neither charge")
        form.locator("button").click()
        page.wait_for_selector("#outcome")
        assert page.locator("#outcome-done").inner_text() == "2"
        assert page.locator("#inbox-empty").count() == 1
    for job_id in parked:
        last = engine.history(job_id)[-1]
        assert (last.event, last.to_state, last.actor, last.reason) == (
            "resolve",
            "failed",
            "carol",
            "gateway shows neither charge",
        )


def test_control_posts_without_a_session_or_a_csrf_token_are_refused(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    forms = {
        "/queues/act": {"queue": "default", "action": "pause", "reason": "x"},
        "/schedules/act": {"name": "none", "action": "trigger", "reason": "x"},
        "/bulk": {"action": "cancel", "state": "queued", "reason": "x"},
        "/limits/act": {"action": "set", "key": "queue:default", "concurrency": "1", "reason": "x"},
        "/investigate/resolve": {
            "id": ids["investigate"],
            "action": "resolve_failed",
            "reason": "x",
        },
    }
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        for path, form in forms.items():  # no session: 401
            assert page.request.post(base + path, form=form).status == 401
        _log_in(page, base)
        for path, form in forms.items():  # a session but no CSRF token: 403
            answer = page.request.post(base + path, form=form)
            assert answer.status == 403
            assert "CSRF" in answer.text()
        page.goto(base + "/queues")
        assert re.search(r"jobfsm", page.title())
    assert engine.paused() == {}
    assert engine.limits() == []
    assert engine.get(ids["investigate"]).state == "investigate"
    assert engine.counts().get(("default", "cancelled"), 0) == 1  # the seed's one


def test_search_finds_by_each_field_and_pages_newest_first(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    engine.submit_many(
        [
            ("bulk.item", {"n": i}, {"queue": "bulk", "correlation_id": "batch-7"})
            for i in range(120)
        ]
    )
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/search")
        page.fill("#search-form input[name=error]", "gateway TIMED out")
        page.click("#search-form button")
        page.wait_for_selector("#results")
        rows = page.locator("#results tbody td.mono a").all_inner_texts()
        assert rows == [ids["investigate"]]
        screenshot(page, "search", tmp_path)
        page.goto(base + "/search?q=batch-7")
        seen: list[str] = []
        for _ in range(5):
            seen += page.locator("#results tbody td.mono a").all_inner_texts()
            if page.locator("#next-page").count() == 0:
                break
            page.click("#next-page")
            page.wait_for_load_state()
        assert len(seen) == 120
        assert seen == sorted(set(seen), reverse=True)
        page.goto(base + "/search?state=nope")
        assert "unknown state" in page.locator("#error").inner_text()


def test_workers_page_shows_each_owner_with_its_kinds_and_jobs(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, _ids = seeded
    held = engine.scan(ScanRequest(states=engine.spec.sources("heartbeat"), limit=100))
    of_b = [j for j in held if j.owner == OWNER_B]
    # worker A's scheduler told the store the kinds it handles; B's never did
    store = engine.store
    assert isinstance(store, HoldsSchedules)
    now = time.time()
    beat = SchedulerBeat(str(OWNER_A), ("mail.send", "mail.digest"), now)
    store.beat_scheduler(beat, lead_until=None, forget_before=now - 3600)
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/workers")
        a = page.locator("tr[data-owner=a1b2c3d4e5f6a7b8]").inner_text()
        assert "worker-a.example" in a
        assert "4101" in a
        assert "mail.send" in a
        assert (
            "mail.digest" in page.locator("tr[data-owner=a1b2c3d4e5f6a7b8] td.handles").inner_text()
        )
        b = page.locator("tr[data-owner=b9c8d7e6f5a4b3c2]")
        assert "report.build" in b.inner_text()
        assert b.locator("td.held strong").inner_text() == str(len(of_b))
        assert b.locator("td.handles").inner_text() == "not reported"
        for state in {j.state for j in of_b}:
            n = sum(j.state == state for j in of_b)
            assert f"{state} {n}" in b.inner_text()
        screenshot(page, "workers", tmp_path)


def test_a_limit_set_from_the_page_caps_the_next_claim_and_a_clear_lifts_it(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, _ids = seeded
    engine.submit_many([("vendor.call", {"n": i}, {"queue": "vendor"}) for i in range(5)])
    engine.set_limit("queue:reports", concurrency=4, actor="alice", reason="reports share a db")
    with _dashboard(url, tmp_path) as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/limits")
        assert page.locator("tr[data-limit]").count() == 1
        form = page.locator("#limit-set")
        form.locator("input[name=key]").fill("kind:vendor.call")
        form.locator("input[name=concurrency]").fill("0")
        form.locator("input[name=reason]").fill("vendor allows two connections")
        form.locator("button").click()
        # refused with checked's words, the typed values kept to correct, nothing stored
        assert (
            "concurrency must be a positive integer; got 0" in page.locator("#error").inner_text()
        )
        assert [s.limit.key for s in engine.limits()] == ["queue:reports"]
        form = page.locator("#limit-set")
        assert form.locator("input[name=key]").input_value() == "kind:vendor.call"
        form.locator("input[name=concurrency]").fill("2")
        form.locator("input[name=rate]").fill("100")
        form.locator("input[name=period]").fill("1")
        form.locator("button").click()
        page.wait_for_selector("#done")
        # in force in the store, under the operator's name: a claim leases at most 2
        status = next(s for s in engine.limits() if s.limit.key == "kind:vendor.call")
        assert (status.limit.key, status.limit.concurrency, status.limit.actor) == (
            "kind:vendor.call",
            2,
            "carol",
        )
        store = open_store(url)
        try:
            leased = Engine(store).claim(PROBE, ["vendor"], limit=10)
        finally:
            store.close()
        assert len(leased) == 2
        # the page's counts are the store's, and the queue's jobs carry the badge
        page.goto(base + "/limits")
        row = page.locator("tr[data-limit='kind:vendor.call']")
        assert row.locator("td.holding").inner_text().split()[0] == "2"
        assert row.locator("td.waiting").inner_text() == "3"
        assert "carol" in row.locator("td.who").inner_text()
        screenshot(page, "limits", tmp_path)
        page.goto(base + "/jobs?queue=vendor")
        assert page.locator("#job-list [data-limit-badge='kind:vendor.call']").count() == 5
        # cleared from the page: the waiting jobs are leased
        page.goto(base + "/limits")
        clear = page.locator("form[data-clear='kind:vendor.call']")
        clear.locator("input[name=reason]").fill("vendor raised the cap")
        clear.locator("button").click()
        page.wait_for_selector("#done")
        assert [s.limit.key for s in engine.limits()] == ["queue:reports"]
        assert len(_fresh_claim(url, "vendor")) == 1
