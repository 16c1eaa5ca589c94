"""The dashboard in a real headless Chromium against real stores with jobs in every state.

Screenshots are taken on every run; `JOBFSM_SCREENSHOTS=1` writes them into
docs/images/ (where docs/dashboard.md shows them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fsm import Engine, open_store
from fsm.service.progress import envelope

from .browser import (
    PortTaken,
    browser_context,
    chromium_browser,
    dashboard_process,
    free_port,
    screenshot,
    token_file,
)
from .clients import TOKENS
from .seed import OWNER_B, seed

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
def chromium(chromium_process: Any) -> Iterator[Any]:
    with browser_context(chromium_process) as context:
        context.set_default_timeout(WAIT_MS)
        yield context


def _tokens(tmp_path: Path) -> tuple[str, str]:
    return "--token-file", str(token_file(tmp_path, TOKENS))


def _log_in(page: Any, base: str, name: str = "carol") -> None:
    page.goto(base + "/login")
    page.fill("input[name=token]", TOKENS[name])
    page.click("#login button[type=submit]")
    page.wait_for_selector("#operator")


def _watch_dialogs(page: Any) -> list[str]:
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return dialogs


def test_operator_resolves_a_parked_job_in_the_browser_and_the_trail_names_them(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    with dashboard_process(url, *_tokens(tmp_path), log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        dialogs = _watch_dialogs(page)
        # an anonymous visitor sees the log-in page and nothing else
        page.goto(base + "/")
        assert page.url.startswith(base + "/login")
        screenshot(page, "login", tmp_path)
        assert page.locator("nav").count() == 0
        assert "payments" not in page.content()
        _log_in(page, base, "carol")
        # overview: counts per state and queue, live workers
        page.goto(base + "/")
        counts = page.locator("#counts")
        assert "payments" in counts.inner_text()
        assert page.locator("#workers").inner_text().count("worker-") == 2
        screenshot(page, "overview", tmp_path)
        # the lifecycle diagram with live counts (its screenshot: test_browser_lifecycle.py)
        page.goto(base + "/diagram")
        assert page.locator("#lifecycle svg").count() == 1
        # the job with a <script> payload renders it as text, and nothing runs
        page.goto(f"{base}/jobs/{ids['xss']}")
        assert "<script>window.__xss" in page.locator("#payload").inner_text()
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert "(rejected)" in page.locator("#timeline").inner_text()
        screenshot(page, "job", tmp_path)
        # resolve from the investigate inbox: the form asks for a reason, not a name
        page.goto(base + "/investigate")
        card = page.locator(f"#parked-{ids['investigate']}")
        assert "gateway timed out" in card.inner_text()
        screenshot(page, "investigate", tmp_path)
        assert card.locator("form").count() == 1  # one form per job, the action chosen in it
        form = card.locator("form.one")
        assert form.locator("input[name=actor]").count() == 0
        form.locator("select[name=action]").select_option("resolve_succeeded")
        form.locator("input[name=reason]").fill("gateway shows the charge captured")
        form.locator("button").click()
        page.wait_for_selector("#done")
        assert page.locator("#job-state").inner_text() == "succeeded"
        # logging out ends the session: the next page is the log-in page again
        page.click("form.logout button")
        page.wait_for_url(re.compile(r".*/login$"))
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.url.startswith(base + "/login")
        assert dialogs == []
    last = engine.history(ids["investigate"])[-1]
    assert (last.event, last.to_state, last.actor, last.reason) == (
        "resolve",
        "succeeded",
        "carol",
        "gateway shows the charge captured",
    )
    assert engine.get(ids["investigate"]).state == "succeeded"


_ATTACK = """<!doctype html><html><body><script>
window.results = {};
function attack() {
  fetch(%(read)s, {credentials: "include"})
    .then(r => r.text().then(t => { window.results.read = [r.status, t.includes("1250")]; }))
    .catch(e => { window.results.read = ["blocked", String(e)]; });
}
</script>
<form id="f" method="post" action=%(act)s>
<input name="action" value="resolve_failed"><input name="reason" value="rebound">
<input name="csrf" value="x"><input name="actor" value="mallory"></form>
</body></html>"""


@contextmanager
def attacker_site(port: int, html: str) -> Iterator[None]:
    """The attacker's web server on this machine: `html` for any path."""
    import contextlib
    import http.server
    import socket
    import threading

    body = html.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        """Remembers the connections it accepted: Chromium opens spare ones ahead of
        need, and one left open would carry a later request of the page to this
        server instead of to whatever listens on the port next."""

        accepted: list[socket.socket] = []

        def get_request(self) -> tuple[socket.socket, Any]:
            conn, addr = super().get_request()
            self.accepted.append(conn)
            return conn, addr

    server = Server(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        for conn in server.accepted:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        thread.join(10)


#: fresh ports the rebinding test tries (see PortTaken)
PORT_TRIES = 3


def _attack(attacker: Any) -> tuple[Any, str]:
    """Run the attacker page's read, then submit its action form: (read result, answer)."""
    attacker.evaluate("attack()")
    attacker.wait_for_function("() => window.results.read !== undefined")
    read = attacker.evaluate("window.results.read")
    with attacker.expect_navigation():
        attacker.evaluate("document.getElementById('f').submit()")
    return read, attacker.content()


def _rebinding_attack(url: str, job_id: str, tmp_path: Path, playwright: Any) -> None:
    import json

    port = free_port()
    # evil.test resolves to this machine, as a rebinding DNS name does after its first answer
    rules = "--host-resolver-rules=MAP evil.test 127.0.0.1"
    tmp_path.mkdir(parents=True)  # this try's folder: its tokens and the dashboard's log
    same = {"read": json.dumps(f"/jobs/{job_id}"), "act": json.dumps(f"/jobs/{job_id}/act")}
    with chromium_browser(playwright, rules) as chromium, browser_context(chromium) as context:
        context.set_default_timeout(WAIT_MS)
        # given the attacker's page loaded from evil.test:PORT, by the attacker's server...
        rebound = context.new_page()
        with attacker_site(port, _ATTACK % same):
            rebound.goto(f"http://evil.test:{port}/attack")
        # ...and then, on that same port, the dashboard, where the operator is logged in
        log = tmp_path / "dash.log"
        with dashboard_process(url, *_tokens(tmp_path), log=log, port=port) as base:
            page = context.new_page()
            _log_in(page, base, "dan")
            # when the rebound page (same origin as far as the browser knows) reads and acts
            read, answer = _attack(rebound)
            # then the dashboard refuses its Host name: nothing read, nothing done
            assert read == [400, False]
            assert "does not answer to that host name" in answer
            # and a page of another origin aiming at the dashboard's own address
            other = free_port()
            cross = {
                "read": json.dumps(f"{base}/jobs/{job_id}"),
                "act": json.dumps(f"{base}/jobs/{job_id}/act"),
            }
            with attacker_site(other, _ATTACK % cross):
                attacker = context.new_page()
                attacker.goto(f"http://evil.test:{other}/attack")
                read, answer = _attack(attacker)
            # cannot read the answer (the browser blocks it), and its form arrives without
            # the operator's SameSite=Strict session: refused
            assert read[0] == "blocked"
            assert "log in first" in answer


def test_a_page_of_another_origin_can_neither_read_a_job_nor_act(
    seeded: tuple[str, Engine, dict[str, str]], playwright: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    job_id = ids["investigate"]
    # the dashboard must bind the port the attacker's server just let go: another
    # process of the suite may take it in between (then a new port, a new browser)
    for attempt in range(PORT_TRIES):
        try:
            _rebinding_attack(url, job_id, tmp_path / f"try-{attempt}", playwright)
            break
        except PortTaken:
            if attempt == PORT_TRIES - 1:
                raise
    assert engine.get(job_id).state == "investigate"
    assert [e.event for e in engine.history(job_id)][-1] == "ambiguous"


def test_live_part_updates_without_a_reload(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, _ids = seeded
    with dashboard_process(url, *_tokens(tmp_path), log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        _log_in(page, base)
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


_SLOW_FETCH = """
window.__inflight = 0; window.__most = 0; window.__calls = 0;
const realFetch = window.fetch;
window.fetch = async function (...args) {
  window.__calls += 1; window.__inflight += 1;
  window.__most = Math.max(window.__most, window.__inflight);
  try { await new Promise(r => setTimeout(r, 2500)); return await realFetch.apply(this, args); }
  finally { window.__inflight -= 1; }
};
"""


def test_a_refresh_waits_for_the_previous_one(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    # given a page refreshed every second whose answers take 2.5 s to arrive
    url, _engine, _ids = seeded
    args = (*_tokens(tmp_path), "--refresh", "1")
    with dashboard_process(url, *args, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.add_init_script(_SLOW_FETCH)
        page.goto(base + "/")
        # when 8 seconds pass
        page.wait_for_timeout(8000)
        # then it kept refreshing, never two requests at once
        assert page.evaluate("window.__calls") >= 2
        assert page.evaluate("window.__most") == 1


def test_read_only_dashboard_shows_no_action_form(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, _engine, ids = seeded
    args = (*_tokens(tmp_path), "--read-only")
    with dashboard_process(url, *args, log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        _log_in(page, base)
        page.goto(base + "/investigate")
        assert page.locator("form[data-action]").count() == 0
        assert "read-only" in page.locator("header").inner_text()
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.locator("input[name=reason]").count() == 0


def test_a_wrong_token_does_not_log_in(
    seeded: tuple[str, Engine, dict[str, str]], chromium: Any, tmp_path: Path
) -> None:
    url, engine, ids = seeded
    with dashboard_process(url, *_tokens(tmp_path), log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        page.goto(base + "/login")
        page.fill("input[name=token]", "not-the-token-0123456789")
        page.click("#login button[type=submit]")
        assert "wrong token" in page.locator("main").inner_text()
        page.goto(f"{base}/jobs/{ids['investigate']}")
        assert page.url.startswith(base + "/login")
        assert page.locator("input[name=reason]").count() == 0
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
    with dashboard_process(pg_url, *_tokens(tmp_path), log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        _log_in(page, base)
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
    with dashboard_process(url, *_tokens(tmp_path), log=tmp_path / "dash.log") as base:
        page = chromium.new_page()
        _log_in(page, base)
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
