"""The dashboard app over a real SQLite store, through Starlette's test client: every
page, escaping, read-only mode, CSRF and audited actions carried out as the operator
who logged in (docs/dashboard.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, open_store
from fsm.telemetry.prometheus import PrometheusMetrics
from tests.conftest import need_program

from .clients import TOKENS, client, csrf_of, operator
from .seed import XSS, seed


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


def test_every_page_renders_with_the_live_counts(engine: Engine, ids: dict[str, str]) -> None:
    c = operator(engine)
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
    diagram = operator(engine).get("/diagram").text
    assert "<svg" in diagram
    assert ">ambiguous: 2</text>" in diagram  # edges counted over the last hour
    assert ">investigate</text>" in diagram


def test_without_graphviz_the_diagram_says_what_to_install(
    engine: Engine, ids: dict[str, str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    page = operator(engine).get(f"/jobs/{ids['failed']}")
    assert page.status_code == 200
    assert "install Graphviz" in page.text


def test_stored_script_text_is_rendered_inert(engine: Engine, ids: dict[str, str]) -> None:
    c = operator(engine)
    for path in (f"/jobs/{ids['xss']}", f"/jobs?q={XSS}"):
        text = c.get(path).text
        assert "<script>window.__xss" not in text
    text = c.get(f"/jobs/{ids['xss']}").text
    assert "&lt;script&gt;window.__xss" in text


def test_the_job_page_shows_the_rejected_stale_report(engine: Engine, ids: dict[str, str]) -> None:
    text = operator(engine).get(f"/jobs/{ids['succeeded']}").text
    assert 'id="rejected-count"' in text
    assert "(rejected)" in text


def test_list_filters_and_pages(engine: Engine, ids: dict[str, str]) -> None:
    c = operator(engine)
    text = c.get("/jobs", params={"state": "investigate"}).text
    assert ids["investigate"] in text
    assert ids["failed"] not in text
    assert ids["queued"] in c.get("/jobs", params={"q": "mail-2"}).text
    first = c.get("/jobs", params={"kind": "mail.send"}).text
    assert 'id="next-page"' not in first
    assert c.get("/jobs", params={"state": "nope"}).status_code == 400
    assert c.get("/jobs", params={"after": "'; DROP TABLE jobs"}).status_code == 400


def test_an_action_is_carried_out_as_the_logged_in_operator_and_audited(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = operator(engine, "carol")
    job_id = ids["investigate"]
    csrf = csrf_of(c, f"/jobs/{job_id}")
    # a free-text actor in the form is no identity: the trail names who logged in
    form = {"csrf": csrf, "action": "resolve_failed", "actor": "mallory", "reason": "refunded"}
    done = c.post(f"/jobs/{job_id}/act", data=form, follow_redirects=False)
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
    again = c.post(f"/jobs/{job_id}/act", data={"csrf": csrf, "action": "cancel", "reason": "oops"})
    assert again.status_code == 409
    assert "cancel" in again.text
    assert engine.history(job_id)[-1] == last


def test_actions_need_the_sessions_csrf_token_and_the_same_origin(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = operator(engine)
    job_id = ids["investigate"]
    csrf = csrf_of(c, f"/jobs/{job_id}")
    form = {"action": "cancel", "reason": "x"}
    assert c.post(f"/jobs/{job_id}/act", data=form).status_code == 403
    assert c.post(f"/jobs/{job_id}/act", data={**form, "csrf": "forged"}).status_code == 403
    # the pre-login double-submit cookie is no CSRF token once logged in
    cookie = c.cookies.get("jobfsm_csrf")
    assert cookie is not None
    assert c.post(f"/jobs/{job_id}/act", data={**form, "csrf": cookie}).status_code == 403
    for origin in ("http://evil.example", "null", "http://127.0.0.1:9999"):
        cross = c.post(
            f"/jobs/{job_id}/act", data={**form, "csrf": csrf}, headers={"Origin": origin}
        )
        assert cross.status_code == 403, origin
    site = c.post(
        f"/jobs/{job_id}/act",
        data={**form, "csrf": csrf},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert site.status_code == 403
    assert engine.get(job_id).state == "investigate"


def test_a_bearer_token_acts_for_scripts_as_its_operator(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine)
    headers = {"Authorization": f"Bearer {TOKENS['dan']}"}
    form = {"action": "cancel", "reason": "cleanup"}
    done = c.post(f"/jobs/{ids['queued']}/act", data=form, headers=headers, follow_redirects=False)
    assert done.status_code == 303
    assert engine.get(ids["queued"]).state == "cancelled"
    assert engine.history(ids["queued"])[-1].actor == "dan"


def test_read_only_mode_offers_and_accepts_no_action(engine: Engine, ids: dict[str, str]) -> None:
    c = operator(engine, read_only=True)
    for path in (f"/jobs/{ids['investigate']}", "/investigate"):
        page = c.get(path).text
        assert 'name="reason"' not in page
        assert "read-only" in page
    form = {"csrf": csrf_of(c, "/"), "action": "cancel", "reason": "x"}
    refused = c.post(
        f"/jobs/{ids['investigate']}/act",
        data=form,
        headers={"Authorization": f"Bearer {TOKENS['carol']}"},
    )
    assert refused.status_code == 403
    assert engine.get(ids["investigate"]).state == "investigate"


def test_metrics_endpoint_serves_jobs_by_state_to_an_operator(
    engine: Engine, ids: dict[str, str]
) -> None:
    metrics = PrometheusMetrics()
    metrics.watch_store(engine.counts)
    c = client(engine, metrics=metrics)
    assert c.get("/metrics").status_code == 401
    headers = {"Authorization": f"Bearer {TOKENS['carol']}"}
    text = c.get("/metrics", headers=headers).text
    assert 'jobfsm_jobs{queue="payments",state="investigate"} 2.0' in text


def test_the_confirmation_shows_only_known_actions(engine: Engine, ids: dict[str, str]) -> None:
    text = operator(engine).get(f"/jobs/{ids['failed']}", params={"done": "you were hacked"}).text
    assert "you were hacked" not in text


def test_the_reason_follows_the_engines_rule(engine: Engine, ids: dict[str, str]) -> None:
    # given the engine's bound on a reason (1,000 printable characters, no newline)
    c = operator(engine)
    job_id = ids["investigate"]
    csrf = csrf_of(c, f"/jobs/{job_id}")
    for reason in ("x" * 1001, "two\nlines", "   "):
        form = {"csrf": csrf, "action": "cancel", "reason": reason}
        # when the dashboard is sent one the engine would refuse, then it refuses it too
        assert c.post(f"/jobs/{job_id}/act", data=form).status_code == 409
    assert engine.get(job_id).state == "investigate"
    assert 'maxlength="1000"' in c.get(f"/jobs/{job_id}").text


def test_the_job_page_shows_reason_codes_and_marks(engine: Engine) -> None:
    from fsm import Owner

    worker = Owner(host="worker-c.example", pid=77, incarnation="inc-c")
    job = engine.submit("pay", {"amount": 5}, retry_safe=False)
    (leased,) = engine.claim(worker, ids=[job.id])
    engine.start(job.id, leased.fence)
    engine.mark(job.id, leased.fence, "charging <card>", "ch_9")
    engine.ambiguous(job.id, leased.fence, "timeout from the provider")

    c = operator(engine)
    page = c.get(f"/jobs/{job.id}").text
    inbox = c.get("/investigate").text

    assert "<th>code</th>" in page
    for code in ("submitted", "started", "mark", "handler_ambiguous"):
        assert f'<td class="mono">{code}</td>' in page
    assert "charging &lt;card&gt; [ch_9]" in page  # escaped
    assert "handler_ambiguous" in inbox


def test_the_job_page_shows_each_entrys_failure_stage_and_where_the_last_error_came_from(
    engine: Engine,
) -> None:
    # given a job whose handler failed on its first attempt (issue 37 item 11)
    from fsm import Owner

    job = engine.submit("pay", {"amount": 5})
    (leased,) = engine.claim(Owner(host="worker-c.example", pid=77, incarnation="i"), ids=[job.id])
    engine.start(job.id, leased.fence)
    engine.fail(job.id, leased.fence, "card declined", delay=60.0)
    # when its page is read
    text = operator(engine).get(f"/jobs/{job.id}").text
    # then the timeline has a stage column with the failure's stage, and the record says
    # where the last error came from
    assert "<th>stage</th>" in text
    assert '<td class="mono">handler</td>' in text
    assert '<td id="error-stage">stage handler, attempt 1</td>' in text


def test_a_job_that_succeeded_after_a_retry_shows_no_error_on_its_page(engine: Engine) -> None:
    # given a job whose first attempt asked for a retry and whose second succeeded
    from fsm import FakeClock, Owner

    clock = FakeClock(1_700_000_000.0)
    eng = Engine(engine.store, clock=clock)
    job = eng.submit("pay", {})
    for attempt in (1, 2):
        (leased,) = eng.claim(Owner(host="w.example", pid=7, incarnation="i"), ids=[job.id])
        eng.start(job.id, leased.fence)
        if attempt == 1:
            eng.fail(job.id, leased.fence, "Retry: retry requested", delay=1.0)
            clock.advance(2.0)
        else:
            eng.succeed(job.id, leased.fence, {"ok": True})
    # when its page is read (issue 34 item 12)
    text = operator(eng).get(f"/jobs/{job.id}").text
    # then the record shows no last error; the trail keeps the first attempt's
    assert '<td class="err" id="last-error">\u2013</td>' in text
    assert 'id="error-stage"' not in text
    assert "Retry: retry requested" in text
