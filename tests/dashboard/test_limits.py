"""The limits page on the real stores: its counts against the store's, a set and a
clear audited under the operator's name and obeyed by the next claim, bad input
named with `checked`'s own words and nothing stored, read-only mode and a request
without a session or CSRF token refused, the badges and the page's bound."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from fsm import Engine, FakeClock, Owner, open_store
from fsm.dashboard import limits_view
from fsm.errors import BadInput
from fsm.lifecycle.limits import Limit, checked
from fsm.service.limits import limit_changes, limiting

from .clients import client, csrf_of, operator

OWNER = Owner("host.example", 7, "0123456789abcdef")
ROW = re.compile(
    r'<tr id="limit-(?P<key>[^"]+)".*?<td class="num holding">(?P<holding>\d+).*?'
    r'<td class="num waiting">(?P<waiting>\d+)',
    re.S,
)
ERROR = re.compile(r'<p class="error" id="error">([^<]*)</p>')


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        yield Engine(store, clock=FakeClock(1_700_000_000.0))
    finally:
        store.close()


def _rows(page: str) -> dict[str, tuple[int, int]]:
    """limit key -> (holding, waiting) as the page shows them."""
    return {m["key"]: (int(m["holding"]), int(m["waiting"])) for m in ROW.finditer(page)}


def _stored(engine: Engine) -> dict[str, Limit]:
    return limiting(engine.kernel).limits()


def _post(c: TestClient, **form: str) -> Any:
    return c.post(
        "/limits/act", data={"csrf": csrf_of(c, "/limits"), **form}, follow_redirects=False
    )


def test_the_page_shows_the_stores_holding_and_waiting_counts(engine: Engine) -> None:
    engine.submit_many([("mail.send", {"i": i}, {}) for i in range(5)])
    engine.submit_many([("report.build", {"i": i}, {"queue": "reports"}) for i in range(3)])
    engine.set_limit("kind:mail.send", concurrency=2, actor="ops", reason="vendor cap")
    engine.set_limit("queue:reports", rate=1, period=3600, actor="ops", reason="db calm")
    leased = engine.claim(OWNER, ["default", "reports"], limit=20)
    # two emails (the concurrency), one report (the rate): the rest wait
    assert sorted(j.kind for j in leased) == ["mail.send", "mail.send", "report.build"]
    store_counts = {s.limit.key: (s.holding, s.waiting) for s in engine.limits()}
    assert store_counts == {"kind:mail.send": (2, 3), "queue:reports": (1, 2)}
    c = operator(engine)
    page = c.get("/limits")
    assert page.status_code == 200
    assert _rows(page.text) == store_counts
    # and so does the live part the page fetches again every few seconds
    live = c.get("/limits", headers={"X-Jobfsm-Fragment": "1"})
    assert "<html" not in live.text
    assert _rows(live.text) == store_counts
    assert "1 per 3600 s" in page.text
    assert "ops, " in page.text  # who set it
    assert "vendor cap" in page.text
    # the limited queue carries its badge on the overview and the queues page
    for path in ("/", "/queues"):
        assert 'data-limit-badge="queue:reports"' in c.get(path).text
    # and the limited kind on the job list
    assert 'data-limit-badge="kind:mail.send"' in c.get("/jobs").text


def test_set_and_clear_are_audited_as_the_operator_and_obeyed_by_the_next_claim(
    engine: Engine,
) -> None:
    engine.submit_many([("mail.send", {"i": i}, {}) for i in range(4)])
    c = operator(engine, "dan")
    answer = _post(
        c,
        action="set",
        key="kind:mail.send",
        concurrency="1",
        rate="10",
        period="0.5",
        reason="vendor allows one connection",
    )
    assert answer.status_code == 303, answer.text
    assert "done=set" in answer.headers["location"]
    limit = _stored(engine)["kind:mail.send"]
    assert (limit.concurrency, limit.rate, limit.period) == (1, 10, 0.5)
    assert (limit.actor, limit.reason, limit.origin) == (
        "dan",
        "vendor allows one connection",
        "operator",
    )
    change = limit_changes(engine.kernel, "kind:mail.send", 1)[0]
    assert (change.actor, change.before, change.after) == ("dan", None, "1 running, 10 per 0.5s")
    assert len(engine.claim(OWNER, ["default"], limit=10)) == 1
    answer = _post(c, action="clear", key="kind:mail.send", reason="vendor raised the cap")
    assert answer.status_code == 303, answer.text
    assert "kind:mail.send" not in _stored(engine)
    change = limit_changes(engine.kernel, "kind:mail.send", 1)[0]
    assert (change.actor, change.reason, change.after) == ("dan", "vendor raised the cap", None)
    assert len(engine.claim(OWNER, ["default"], limit=10)) == 3
    page = c.get("/limits").text
    assert "No limits" in page
    assert "vendor raised the cap" in page  # in the recent changes


BAD = [
    ({"concurrency": "0"}, {"concurrency": 0}),
    ({"concurrency": "-1"}, {"concurrency": -1}),
    ({"concurrency": "nan"}, {"concurrency": "nan"}),
    ({"concurrency": "2.5"}, {"concurrency": "2.5"}),
    ({"rate": "0", "period": "1"}, {"rate": 0, "period": 1}),
    ({"rate": "5", "period": "nan"}, {"rate": 5, "period": float("nan")}),
    ({"rate": "5", "period": "inf"}, {"rate": 5, "period": float("inf")}),
    ({"rate": "5", "period": "0.0005"}, {"rate": 5, "period": 0.0005}),
    ({"rate": "5", "period": "soon"}, {"rate": 5, "period": "soon"}),
    ({"rate": "5"}, {"rate": 5}),
    ({"period": "1"}, {"period": 1}),
    ({}, {}),
]


@pytest.mark.parametrize(("form", "typed"), BAD, ids=[repr(f) for f, _ in BAD])
def test_bad_input_is_named_by_checked_and_leaves_the_limit_untouched(
    engine: Engine, form: dict[str, str], typed: dict[str, Any]
) -> None:
    engine.submit("mail.send", {})
    engine.set_limit("kind:mail.send", concurrency=3, actor="ops", reason="before")
    before = _stored(engine)
    changes = limit_changes(engine.kernel)
    with pytest.raises(BadInput) as expected:
        checked("kind:mail.send", **typed)
    c = operator(engine)
    answer = _post(c, action="set", key="kind:mail.send", reason="try", **form)
    assert answer.status_code == 400
    assert [html.unescape(e) for e in ERROR.findall(answer.text)] == [str(expected.value)]
    assert _stored(engine) == before
    assert limit_changes(engine.kernel) == changes
    # the form comes back with what was typed, to correct
    assert 'value="try"' in answer.text


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"key": "email", "concurrency": "1"}, "a limit key is"),
        ({"key": "host:x", "concurrency": "1"}, "a limit applies to a kind or a queue"),
        ({"key": "kind:nosuch", "concurrency": "1"}, "unknown kind 'nosuch'"),
        ({"key": "kind:mail.send", "concurrency": "1", "reason": " "}, "reason"),
        ({"key": "kind:mail.send", "action": "raise"}, "unknown limit action"),
    ],
)
def test_a_bad_key_reason_or_action_is_refused_and_stores_nothing(
    engine: Engine, form: dict[str, str], words: str
) -> None:
    engine.submit("mail.send", {})
    fields = {"action": "set", "reason": "try", **form}
    answer = _post(operator(engine), **fields)
    assert answer.status_code == 400
    (error,) = ERROR.findall(answer.text)
    assert words in html.unescape(error)
    assert _stored(engine) == {}
    assert limit_changes(engine.kernel) == []


def test_a_kind_not_deployed_yet_is_limited_when_ticked(engine: Engine) -> None:
    answer = _post(
        operator(engine),
        action="set",
        key="kind:vendor.call",
        concurrency="5",
        new_kind="1",
        reason="before the deploy",
    )
    assert answer.status_code == 303, answer.text
    assert _stored(engine)["kind:vendor.call"].concurrency == 5


def test_read_only_mode_shows_limits_and_refuses_changes(engine: Engine) -> None:
    engine.submit("mail.send", {})
    engine.set_limit("kind:mail.send", concurrency=3, actor="ops", reason="vendor")
    c = operator(engine, read_only=True)
    page = c.get("/limits").text
    assert 'data-limit="kind:mail.send"' in page
    assert 'id="limit-set"' not in page
    assert "data-clear=" not in page
    assert "Actions disabled: read-only mode" in page
    for form in (
        {"action": "set", "key": "kind:mail.send", "concurrency": "9", "reason": "x"},
        {"action": "clear", "key": "kind:mail.send", "reason": "x"},
    ):
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        answer = c.post(
            "/limits/act", data={"csrf": csrf[1] if csrf else "", **form}, follow_redirects=False
        )
        assert answer.status_code == 403
        assert "read-only" in answer.text
    assert _stored(engine)["kind:mail.send"].concurrency == 3
    assert len(limit_changes(engine.kernel)) == 1


def test_without_a_session_or_a_csrf_token_nothing_changes(engine: Engine) -> None:
    engine.submit("mail.send", {})
    form = {"action": "set", "key": "kind:mail.send", "concurrency": "1", "reason": "x"}
    assert client(engine).post("/limits/act", data=form, follow_redirects=False).status_code == 401
    answer = operator(engine).post("/limits/act", data=form, follow_redirects=False)
    assert answer.status_code == 403
    assert "CSRF" in answer.text
    assert _stored(engine) == {}


def test_the_page_counts_the_first_limits_only_and_says_how_many_exist(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        engine.set_limit(f"queue:q{i}", concurrency=i + 1, actor="ops", reason="many")
    monkeypatch.setattr(limits_view, "LIMITS_SHOWN", 3)
    page = operator(engine).get("/limits").text
    assert list(_rows(page)) == ["queue:q0", "queue:q1", "queue:q2"]
    assert "The first 3 limits by key of 5" in page


def test_change_prefills_the_form_with_the_current_limit(engine: Engine) -> None:
    engine.set_limit("queue:bulk", concurrency=4, rate=20, period=2.5, actor="ops", reason="r")
    page = operator(engine).get("/limits?edit=queue:bulk").text
    form = page[page.index('id="limit-set"') :]
    for name, value in (("key", "queue:bulk"), ("concurrency", "4"), ("rate", "20")):
        assert f'name="{name}"' in form
        assert f'value="{value}"' in form
    assert 'value="2.5"' in form
