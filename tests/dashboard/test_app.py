"""The dashboard app over a real SQLite store, through Starlette's test client:
every page, escaping, the token, read-only mode, CSRF and audited actions."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fsm import Engine, open_store
from fsm.cli.dashboard_cmd import is_loopback
from fsm.dashboard import create_app
from fsm.telemetry.prometheus import PrometheusMetrics
from tests.conftest import need_program

from .browser import dashboard_process
from .seed import XSS, seed

TOKEN = "s3cret-operator-token"


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    store = open_store(sqlite_url)
    try:
        yield Engine(store)
    finally:
        store.close()


@pytest.fixture
def ids(engine: Engine) -> dict[str, str]:
    return seed(engine)


def client(engine: Engine, **options: object) -> TestClient:
    return TestClient(create_app(engine, **options), base_url="http://127.0.0.1:8700")


def csrf_of(c: TestClient, path: str) -> str:
    page = c.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, "page has no form"
    return found.group(1)


def test_every_page_renders_with_the_live_counts(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine, trust_local=True)
    overview = c.get("/")
    assert overview.status_code == 200
    assert "worker-a.example" in overview.text
    assert "worker-b.example" in overview.text
    assert overview.headers["content-security-policy"].startswith("default-src 'none'")
    for path in ("/diagram", "/jobs", "/investigate", f"/jobs/{ids['succeeded']}", "/login"):
        assert c.get(path).status_code == 200, path
    assert c.get("/jobs/NOSUCHJOB").status_code == 404
    fragment = c.get("/", headers={"X-Jobfsm-Fragment": "1"})
    assert "<html" not in fragment.text
    assert 'id="counts"' in fragment.text


def test_the_lifecycle_page_draws_live_counts(engine: Engine, ids: dict[str, str]) -> None:
    need_program("dot", "apt-get install graphviz")
    diagram = client(engine).get("/diagram").text
    assert "<svg" in diagram
    assert "ambiguous (n=2)" in diagram  # edges counted over the last hour
    assert ">investigate</text>" in diagram


def test_without_graphviz_the_diagram_says_what_to_install(
    engine: Engine, ids: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    page = client(engine).get(f"/jobs/{ids['failed']}")
    assert page.status_code == 200
    assert "install Graphviz" in page.text


def test_stored_script_text_is_rendered_inert(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine, trust_local=True)
    for path in (f"/jobs/{ids['xss']}", f"/jobs?q={XSS}"):
        text = c.get(path).text
        assert "<script>window.__xss" not in text
    text = c.get(f"/jobs/{ids['xss']}").text
    assert "&lt;script&gt;window.__xss" in text


def test_the_job_page_shows_the_rejected_stale_report(engine: Engine, ids: dict[str, str]) -> None:
    text = client(engine).get(f"/jobs/{ids['succeeded']}").text
    assert 'id="rejected-count"' in text
    assert "(rejected)" in text


def test_list_filters_and_pages(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine)
    text = c.get("/jobs", params={"state": "investigate"}).text
    assert ids["investigate"] in text
    assert ids["failed"] not in text
    assert ids["queued"] in c.get("/jobs", params={"q": "mail-2"}).text
    first = c.get("/jobs", params={"kind": "mail.send"}).text
    assert 'id="next-page"' not in first
    assert c.get("/jobs", params={"state": "nope"}).status_code == 400
    assert c.get("/jobs", params={"after": "'; DROP TABLE jobs"}).status_code == 400


def test_an_action_is_applied_through_the_engine_and_audited(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine, trust_local=True)
    job_id = ids["investigate"]
    csrf = csrf_of(c, f"/jobs/{job_id}")
    done = c.post(
        f"/jobs/{job_id}/act",
        data={"csrf": csrf, "action": "resolve_failed", "actor": "carol", "reason": "refunded"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert "resolved as failed" in c.get(done.headers["location"]).text
    assert engine.get(job_id).state == "failed"
    last = engine.history(job_id)[-1]
    assert (last.event, last.actor, last.reason, last.to_state) == (
        "resolve",
        "carol",
        "refunded",
        "failed",
    )
    # an illegal action is refused with the engine's message and changes nothing
    again = c.post(
        f"/jobs/{job_id}/act",
        data={"csrf": csrf, "action": "cancel", "actor": "carol", "reason": "oops"},
    )
    assert again.status_code == 409
    assert "cancel" in again.text
    assert engine.history(job_id)[-1] == last


def test_actions_need_the_csrf_token_and_the_same_origin(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine, trust_local=True)
    job_id = ids["investigate"]
    csrf = csrf_of(c, f"/jobs/{job_id}")
    form = {"action": "cancel", "actor": "mallory", "reason": "x"}
    assert c.post(f"/jobs/{job_id}/act", data=form).status_code == 403
    assert c.post(f"/jobs/{job_id}/act", data={**form, "csrf": "forged"}).status_code == 403
    cross = c.post(
        f"/jobs/{job_id}/act",
        data={**form, "csrf": csrf},
        headers={"Origin": "http://evil.example"},
    )
    assert cross.status_code == 403
    assert engine.get(job_id).state == "investigate"


def test_with_a_token_actions_need_the_operator_to_log_in(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine, token=TOKEN)
    job_id = ids["investigate"]
    csrf = csrf_of(c, "/login")
    form = {"csrf": csrf, "action": "requeue", "actor": "dan", "reason": "retry", "attempts": "2"}
    assert c.post(f"/jobs/{job_id}/act", data=form).status_code == 401
    assert "Log in" in c.get(f"/jobs/{job_id}").text
    bad = c.post("/login", data={"csrf": csrf, "token": "wrong-token"})
    assert bad.status_code == 401
    assert c.post(f"/jobs/{job_id}/act", data=form).status_code == 401
    good = c.post("/login", data={"csrf": csrf, "token": TOKEN}, follow_redirects=False)
    assert good.status_code == 303
    assert TOKEN not in good.headers["set-cookie"]
    assert c.post(f"/jobs/{job_id}/act", data=form, follow_redirects=False).status_code == 303
    job = engine.get(job_id)
    assert job.state == "queued"
    assert engine.history(job_id)[-1].actor == "dan"


def test_a_bearer_token_acts_for_scripts(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine, token=TOKEN)
    csrf = csrf_of(c, "/login")
    form = {"csrf": csrf, "action": "cancel", "actor": "cron", "reason": "cleanup"}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    done = c.post(f"/jobs/{ids['queued']}/act", data=form, headers=headers, follow_redirects=False)
    assert done.status_code == 303
    assert engine.get(ids["queued"]).state == "cancelled"


def test_without_token_or_local_trust_actions_are_disabled(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine)
    page = c.get(f"/jobs/{ids['investigate']}").text
    assert "Disabled" in page
    assert 'name="actor"' not in page
    csrf = csrf_of(c, "/login") if 'name="csrf"' in c.get("/login").text else "x"
    form = {"csrf": csrf, "action": "cancel", "actor": "eve", "reason": "x"}
    assert c.post(f"/jobs/{ids['investigate']}/act", data=form).status_code == 403


def test_read_only_mode_offers_and_accepts_no_action(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine, read_only=True, token=TOKEN)
    for path in (f"/jobs/{ids['investigate']}", "/investigate"):
        page = c.get(path).text
        assert 'name="actor"' not in page
        assert "read-only" in page
    c.cookies.set("jobfsm_csrf", "abc")
    form = {"csrf": "abc", "action": "cancel", "actor": "eve", "reason": "x"}
    refused = c.post(
        f"/jobs/{ids['investigate']}/act",
        data=form,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert refused.status_code == 403
    assert engine.get(ids["investigate"]).state == "investigate"


def test_metrics_endpoint_serves_jobs_by_state(engine: Engine, ids: dict[str, str]) -> None:
    metrics = PrometheusMetrics()
    metrics.watch_store(engine.counts)
    text = client(engine, metrics=metrics).get("/metrics").text
    assert 'jobfsm_jobs{queue="payments",state="investigate"} 2.0' in text


def test_the_confirmation_shows_only_known_actions(engine: Engine, ids: dict[str, str]) -> None:
    text = client(engine).get(f"/jobs/{ids['failed']}", params={"done": "you were hacked"}).text
    assert "you were hacked" not in text


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("10.1.2.3", False), ("dash.example.com", False)],
)  # fmt: skip
def test_actions_without_a_token_are_open_only_on_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_bound_beyond_loopback_without_a_token_the_command_disables_actions(
    sqlite_url: str, ids: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "dash.log"
    with dashboard_process(sqlite_url, "--host", "0.0.0.0", log=log) as base:
        with urllib.request.urlopen(f"{base}/jobs/{ids['investigate']}", timeout=10) as resp:
            page = resp.read().decode()
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    assert "actions disabled: bound to 0.0.0.0" in log.read_text()
    assert "Disabled: actions need an operator token" in page
    assert 'name="actor"' not in page
    assert 'jobfsm_jobs{queue="payments",state="investigate"} 2.0' in metrics


def test_the_job_page_shows_reason_codes_and_marks(engine: Engine) -> None:
    from fsm import Owner

    worker = Owner(host="worker-c.example", pid=77, incarnation="inc-c")
    job = engine.submit("pay", {"amount": 5}, retry_safe=False)
    (leased,) = engine.claim(worker, ids=[job.id])
    engine.start(job.id, leased.fence)
    engine.mark(job.id, leased.fence, "charging <card>", "ch_9")
    engine.ambiguous(job.id, leased.fence, "timeout from the provider")

    page = client(engine, trust_local=True).get(f"/jobs/{job.id}").text
    inbox = client(engine, trust_local=True).get("/investigate").text

    assert "<th>code</th>" in page
    for code in ("submitted", "started", "mark", "handler_ambiguous"):
        assert f'<td class="mono">{code}</td>' in page
    assert "charging &lt;card&gt; [ch_9]" in page  # escaped
    assert "handler_ambiguous" in inbox
