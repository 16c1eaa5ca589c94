"""Who may read and act (issue 32 items 1, 2, 3, 7, 13): no anonymous reader or actor on
any address, the Host allow-list against DNS rebinding, sessions that expire and end,
the login rate limit, token rules, and request bodies refused before they are read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from fsm import Engine, FakeClock, open_store
from fsm.dashboard import app_user, create_app
from fsm.dashboard.auth import LoginLimiter, Sessions, Tokens, parse_tokens
from fsm.errors import BadInput

from .clients import TOKENS, client, csrf_of, log_in, operator
from .seed import seed


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


# --- item 1: loopback is not an identity ------------------------------------------------


def test_an_anonymous_client_on_loopback_cannot_act_even_with_a_forged_csrf_pair(
    engine: Engine, ids: dict[str, str]
) -> None:
    # given the review's request: a client that sets the CSRF cookie and field itself
    c = client(engine)
    c.cookies.set("jobfsm_csrf", "x")
    form = {"csrf": "x", "action": "resolve_succeeded", "actor": "mallory", "reason": "r"}
    # when it posts an action to a dashboard on 127.0.0.1
    done = c.post(f"/jobs/{ids['investigate']}/act", data=form, follow_redirects=False)
    # then it is refused and the job is untouched
    assert done.status_code == 401
    assert engine.get(ids["investigate"]).state == "investigate"
    assert all(e.actor != "mallory" for e in engine.history(ids["investigate"]))


def test_the_app_refuses_to_start_without_a_way_to_authenticate(engine: Engine) -> None:
    with pytest.raises(BadInput, match="no page or action is anonymous"):
        create_app(engine)
    with pytest.raises(TypeError):
        create_app(engine, trust_local=True)  # type: ignore[call-arg]


# --- item 3: reads are behind the same login ---------------------------------------------


def test_an_anonymous_visitor_is_sent_to_the_login_page_from_every_page(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine)
    for path in ("/", "/diagram", "/jobs", "/investigate", f"/jobs/{ids['investigate']}"):
        page = c.get(path, follow_redirects=False)
        assert page.status_code == 303, path
        assert page.headers["location"].startswith("/login?next=")
    login = c.get("/login")
    assert login.status_code == 200
    assert 'name="token"' in login.text
    assert ids["investigate"] not in login.text
    assert 'href="/jobs"' not in login.text  # no navigation for a stranger
    assert c.get("/", headers={"X-Jobfsm-Fragment": "1"}).status_code == 401
    assert c.get("/metrics").status_code == 401
    assert c.get("/static/dashboard.css").status_code == 200


def test_after_logging_in_the_operator_lands_where_they_were_going(
    engine: Engine, ids: dict[str, str]
) -> None:
    c = client(engine)
    target = f"/jobs/{ids['investigate']}"
    login = c.get(target)  # follows the redirect to the login page
    csrf = csrf_of(c, "/login")
    assert f'value="{target}"' in login.text
    done = c.post(
        "/login",
        data={"csrf": csrf, "token": TOKENS["dan"], "next": target},
        follow_redirects=False,
    )
    assert done.headers["location"] == target
    for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        c2 = client(engine)
        csrf2 = csrf_of(c2, "/login")
        away = c2.post(
            "/login",
            data={"csrf": csrf2, "token": TOKENS["dan"], "next": evil},
            follow_redirects=False,
        )
        assert away.headers["location"] == "/", evil


def test_public_read_opens_pages_but_never_actions(engine: Engine, ids: dict[str, str]) -> None:
    c = client(engine, public_read=True)
    assert c.get("/").status_code == 200
    assert c.get(f"/jobs/{ids['investigate']}").status_code == 200
    page = c.get(f"/jobs/{ids['investigate']}").text
    assert 'name="reason"' not in page
    form = {"csrf": csrf_of(c, "/login"), "action": "cancel", "reason": "x"}
    assert c.post(f"/jobs/{ids['investigate']}/act", data=form).status_code == 401
    assert engine.get(ids["investigate"]).state == "investigate"


def test_the_session_cookie_is_random_httponly_strict_and_holds_no_token(engine: Engine) -> None:
    c = client(engine)
    csrf = csrf_of(c, "/login")
    done = c.post("/login", data={"csrf": csrf, "token": TOKENS["carol"]}, follow_redirects=False)
    cookie = done.headers["set-cookie"]
    assert cookie.startswith("jobfsm_session=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Max-Age=28800" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over TLS it is (test_command.py)
    assert TOKENS["carol"] not in cookie
    second = operator(engine).cookies.get("jobfsm_session")
    assert c.cookies.get("jobfsm_session") != second


def test_over_https_the_session_cookie_is_secure(engine: Engine) -> None:
    from starlette.testclient import TestClient

    c = TestClient(create_app(engine, tokens=TOKENS), base_url="https://127.0.0.1:8700")
    csrf = csrf_of(c, "/login")
    done = c.post("/login", data={"csrf": csrf, "token": TOKENS["carol"]}, follow_redirects=False)
    assert "Secure" in done.headers["set-cookie"]


def test_logout_ends_the_session(engine: Engine, ids: dict[str, str]) -> None:
    c = operator(engine)
    sid = c.cookies.get("jobfsm_session")
    csrf = csrf_of(c, "/")
    assert c.post("/logout", data={"csrf": "wrong"}).status_code == 403
    out = c.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    # the old session id no longer opens anything, even replayed
    replay = client(engine)
    replay.cookies.set("jobfsm_session", str(sid))
    assert replay.get("/", follow_redirects=False).status_code == 303


def test_a_session_expires_after_its_lifetime() -> None:
    clock = FakeClock(0.0)
    sessions = Sessions(ttl=3600.0, now=clock.now)
    sid = sessions.open("carol")
    clock.advance(3599.0)
    assert sessions.operator(sid) == "carol"
    clock.advance(1.0)
    assert sessions.operator(sid) is None
    assert sessions.operator("guessed") is None


# --- item 2: DNS rebinding ----------------------------------------------------------------


def test_a_request_for_another_host_name_is_refused_before_any_page(
    engine: Engine, ids: dict[str, str]
) -> None:
    # given a logged-in operator's browser, and a page of evil.example whose name was
    # rebound to 127.0.0.1: its requests carry Host: evil.example
    c = operator(engine)
    page = c.get(f"/jobs/{ids['investigate']}", headers={"Host": "evil.example:8700"})
    assert page.status_code == 400
    assert ids["investigate"] not in page.text
    csrf = csrf_of(c, f"/jobs/{ids['investigate']}")
    acted = c.post(
        f"/jobs/{ids['investigate']}/act",
        data={"csrf": csrf, "action": "cancel", "reason": "x"},
        headers={"Host": "evil.example:8700", "Origin": "http://evil.example:8700"},
    )
    assert acted.status_code == 400
    assert engine.get(ids["investigate"]).state == "investigate"
    # the names it is allowed, with any port, work
    for host in ("127.0.0.1:8700", "localhost:8700", "[::1]:8700", "LOCALHOST"):
        assert c.get("/", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_are_configurable_and_star_leaves_it_to_the_application(
    engine: Engine,
) -> None:
    from starlette.testclient import TestClient

    app = create_app(engine, tokens=TOKENS, allowed_hosts=["dash.example.com"])
    c = log_in(TestClient(app, base_url="http://dash.example.com"))
    assert c.get("/").status_code == 200
    assert c.get("/", headers={"Host": "localhost"}).status_code == 400
    assert c.get("/", headers={"Host": "127.0.0.1"}).status_code == 400
    anyhost = operator(engine, allowed_hosts=["*"])
    assert anyhost.get("/", headers={"Host": "whatever.example"}).status_code == 200


# --- item 13: rate limit, token rules -----------------------------------------------------


def test_failed_logins_are_rate_limited_per_client(engine: Engine) -> None:
    c = client(engine)
    csrf = csrf_of(c, "/login")
    codes = [
        c.post("/login", data={"csrf": csrf, "token": f"guess-{i:016d}"}).status_code
        for i in range(12)
    ]
    assert codes[:10] == [401] * 10
    assert codes[10:] == [429, 429]
    # the right token is refused too until the window passes: guessing gains nothing
    right = c.post("/login", data={"csrf": csrf, "token": TOKENS["carol"]})
    assert right.status_code == 429
    assert int(right.headers["retry-after"]) >= 1
    bearer = c.get(
        "/", headers={"Authorization": f"Bearer {TOKENS['carol']}"}, follow_redirects=False
    )
    assert bearer.status_code == 303


def test_the_limit_counts_all_clients_together_too() -> None:
    clock = FakeClock(0.0)
    limiter = LoginLimiter(per_client=10, total=20, window=60.0, now=clock.now)
    for i in range(20):
        assert limiter.retry_after(f"10.0.0.{i}") == 0
        limiter.failed(f"10.0.0.{i}")
    assert limiter.retry_after("10.0.0.99") > 0
    clock.advance(60.0)
    assert limiter.retry_after("10.0.0.99") == 0


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("short-token", "16 to 256"),
        ("aaaaaaaaaaaaaaaaaaaa", "different characters"),
        ("abababababababababab", "different characters"),
        ("has space in it 1234567", "without spaces"),
    ],
)
def test_weak_tokens_are_refused(token: str, why: str) -> None:
    with pytest.raises(BadInput, match=why):
        Tokens({"carol": token})


def test_token_files_name_their_operators_and_refuse_duplicates() -> None:
    tokens = parse_tokens(
        f"# operators\ncarol:{TOKENS['carol']}\n\ndan:{TOKENS['dan']}\n", "tokens.txt"
    )
    assert tokens == TOKENS
    assert parse_tokens(TOKENS["carol"], "$ENV") == {"operator": TOKENS["carol"]}
    with pytest.raises(BadInput, match="line 2: operator 'carol' is named twice"):
        parse_tokens(f"carol:{TOKENS['carol']}\ncarol:{TOKENS['dan']}", "tokens.txt")
    with pytest.raises(BadInput, match=r"line 1: .*16 to 256") as err:
        parse_tokens("carol:tooshort", "tokens.txt")
    assert "tooshort" not in str(err.value)
    with pytest.raises(BadInput, match="same token"):
        Tokens({"a": TOKENS["carol"], "b": TOKENS["carol"]})


# --- mounted: the application's own user is the operator ----------------------------------


def test_mounted_with_the_applications_user_the_trail_names_that_user(
    engine: Engine, ids: dict[str, str]
) -> None:
    from starlette.applications import Starlette
    from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    class HeaderUser(AuthenticationBackend):  # stands in for the application's login
        async def authenticate(self, conn: Any) -> Any:
            name = conn.headers.get("x-test-user")
            return None if name is None else (AuthCredentials(["authenticated"]), SimpleUser(name))

    dash = create_app(engine, authenticator=app_user)
    outer = Starlette(
        routes=[Mount("/ops", dash)],
        middleware=[Middleware(AuthenticationMiddleware, backend=HeaderUser())],
    )
    c = TestClient(outer, base_url="http://localhost")
    job_id = ids["investigate"]
    assert c.get(f"/ops/jobs/{job_id}", follow_redirects=False).status_code == 303
    me = {"x-test-user": "erin"}
    page = c.get(f"/ops/jobs/{job_id}", headers=me)
    assert page.status_code == 200
    csrf = csrf_of_text(page.text)
    done = c.post(
        f"/ops/jobs/{job_id}/act",
        data={"csrf": csrf, "action": "resolve_succeeded", "reason": "checked"},
        headers=me,
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"].endswith(f"/ops/jobs/{job_id}?done=resolve_succeeded")
    assert engine.history(job_id)[-1].actor == "erin"


def csrf_of_text(text: str) -> str:
    import re

    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found is not None
    return found.group(1)


# --- item 7: bodies refused before they are read ------------------------------------------


def _call(app: Any, method: str, path: str, headers: dict[str, str], chunks: list[bytes]) -> Any:
    """Drive the ASGI app by hand; returns (status, how many body chunks it read)."""
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1], "more_body": True}
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 8700),
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], read


BIG = [b"x" * 65536] * 4800  # 300 MiB if it were all read


@pytest.mark.parametrize("read_only", [True, False])
def test_an_upload_to_an_action_is_refused_unread(
    engine: Engine, ids: dict[str, str], read_only: bool
) -> None:
    app = create_app(engine, tokens=TOKENS, read_only=read_only)
    path = f"/jobs/{ids['investigate']}/act"
    boundary = {"content-type": "multipart/form-data; boundary=b", "host": "127.0.0.1:8700"}
    # declared: refused by size before routing
    status, read = _call(app, "POST", path, {**boundary, "content-length": "314572800"}, BIG)
    assert (status, read) == (413, 0)
    # streamed without a length, anonymous: refused (401 / read-only 403) before reading
    status, read = _call(app, "POST", path, boundary, BIG)
    assert (status, read) == (401, 0)
    # streamed by a logged-in operator: multipart is never parsed; urlencoded stops at 16 KiB
    auth = {"authorization": f"Bearer {TOKENS['carol']}", "host": "127.0.0.1:8700"}
    status, read = _call(app, "POST", path, {**auth, "content-type": "multipart/form-data"}, BIG)
    assert (status, read) == ((403, 0) if read_only else (415, 0))
    form = {**auth, "content-type": "application/x-www-form-urlencoded"}
    status, read = _call(app, "POST", path, form, BIG)
    assert (status, read) == ((403, 0) if read_only else (413, 1))
    assert engine.get(ids["investigate"]).state == "investigate"


def test_an_upload_to_the_login_form_is_refused_unread(engine: Engine) -> None:
    app = create_app(engine, tokens=TOKENS, read_only=True)
    host = {"host": "127.0.0.1:8700"}
    status, read = _call(
        app, "POST", "/login", {**host, "content-type": "multipart/form-data"}, BIG
    )
    assert (status, read) == (415, 0)
    form = {**host, "content-type": "application/x-www-form-urlencoded"}
    status, read = _call(app, "POST", "/login", form, BIG)
    assert (status, read) == (413, 1)
    cross = {**form, "origin": "http://evil.example"}
    status, read = _call(app, "POST", "/login", cross, BIG)
    assert (status, read) == (403, 0)


def test_a_malformed_content_length_is_refused(engine: Engine) -> None:
    app = create_app(engine, tokens=TOKENS)
    for value in ("\u00b2", "-1", "1e9", "12 34"):
        status, read = _call(
            app, "POST", "/login", {"host": "127.0.0.1", "content-length": value}, []
        )
        assert (status, read) == (400, 0), value


def test_log_in_through_the_printed_link_opens_a_session(engine: Engine) -> None:
    c = client(engine, token=TOKENS["carol"])
    done = c.get(f"/login?token={TOKENS['carol']}", follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"] == "/"
    assert "jobfsm_session=" in done.headers["set-cookie"]
    assert c.get("/", follow_redirects=False).status_code == 200
    # a page of another site cannot log a browser in with a link
    other = client(engine, token=TOKENS["carol"])
    sent = other.get(
        f"/login?token={TOKENS['carol']}",
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert sent.status_code == 403
    assert log_in(client(engine)).get("/").status_code == 200
