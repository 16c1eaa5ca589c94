"""`jobfsm dashboard` as a process: a token made and a log-in link printed when none is
configured (no anonymous loopback), tokens never from the command line, TLS through
uvicorn, `Secure` cookies over TLS or behind a TLS proxy (issue 32 items 1, 3, 13)."""

from __future__ import annotations

import http.client
import re
import ssl
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.cli.dashboard_cmd import hosts_for, is_loopback
from tests.conftest import need_program

from .browser import ROOT, dashboard_process, token_file
from .clients import TOKENS
from .seed import seed


@pytest.fixture
def ids(sqlite_url: str) -> dict[str, str]:
    store = open_store(sqlite_url)
    try:
        return seed(Engine(store))
    finally:
        store.close()


def _request(
    base: str,
    method: str,
    path: str,
    *,
    body: str | None = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> http.client.HTTPResponse:
    url = urllib.parse.urlsplit(base)
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=context)
    else:
        conn = http.client.HTTPConnection(url.hostname or "", url.port)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def test_without_a_token_the_command_makes_one_and_prints_a_login_link(
    sqlite_url: str, ids: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "dash.log"
    with dashboard_process(sqlite_url, log=log) as base:
        # the review's request: curl forging the CSRF pair, on loopback
        forged = _request(
            base,
            "POST",
            f"/jobs/{ids['investigate']}/act",
            body="csrf=x&action=resolve_succeeded&actor=mallory&reason=r",
            headers={
                "Cookie": "jobfsm_csrf=x",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        read = _request(base, "GET", f"/jobs/{ids['investigate']}")
        found = re.search(r"(http://\S+/login\?token=(\S+))", log.read_text())
        assert found is not None, log.read_text()
        link = urllib.parse.urlsplit(found.group(1))
        opened = _request(base, "GET", f"{link.path}?{link.query}")
    assert forged.status == 401
    assert read.status == 303
    assert len(found.group(2)) >= 32
    assert opened.status == 303
    assert "jobfsm_session=" in (opened.getheader("set-cookie") or "")
    store = open_store(sqlite_url)
    try:
        assert Engine(store).get(ids["investigate"]).state == "investigate"
    finally:
        store.close()


def test_a_token_on_the_command_line_is_refused_without_echoing_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fsm.cli", "dashboard", "--token", "s3cret-operator-token-1234"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "visible to every user of this machine" in done.stderr
    assert "s3cret-operator-token-1234" not in done.stderr + done.stdout


def test_a_weak_token_from_the_environment_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fsm.cli", "dashboard", "--store", sqlite_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
        env={**_env(), "JOBFSM_DASHBOARD_TOKEN": "hunter22"},
    )
    assert done.returncode != 0
    assert "16 to 256 characters, got 8" in done.stderr
    assert "hunter22" not in done.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("JOBFSM_STORE",)}


def _cert(tmp_path: Path) -> tuple[Path, Path]:
    need_program("openssl", "apt-get install openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _login_body(base: str, context: ssl.SSLContext | None = None, **headers: str) -> str:
    """POST a log-in with the CSRF cookie of a first GET; returns the session cookie line."""
    first = _request(base, "GET", "/login", headers=headers, context=context)
    cookie = (first.getheader("set-cookie") or "").split(";", 1)[0]
    csrf = cookie.split("=", 1)[1]
    done = _request(
        base,
        "POST",
        "/login",
        body=urllib.parse.urlencode({"csrf": csrf, "token": TOKENS["carol"]}),
        headers={
            **headers,
            "Cookie": cookie,
            "Content-Type": "application/x-www-form-urlencoded",
        },
        context=context,
    )
    assert done.status == 303
    return done.getheader("set-cookie") or ""


def test_over_tls_the_dashboard_serves_https_and_its_session_cookie_is_secure(
    sqlite_url: str, tmp_path: Path
) -> None:
    cert, key = _cert(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    args = ("--token-file", str(token_file(tmp_path, TOKENS)))
    args += ("--tls-cert", str(cert), "--tls-key", str(key))
    log = tmp_path / "dash.log"
    with dashboard_process(sqlite_url, *args, log=log, scheme="https") as base:
        session = _login_body(base, context)
        plain = base.replace("https://", "http://")
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            _request(plain, "GET", "/login")
    assert "jobfsm_session=" in session
    assert "Secure" in session
    assert "on https://127.0.0.1:" in log.read_text()


@pytest.mark.parametrize("trusted", [True, False])
def test_behind_a_tls_proxy_the_cookie_is_secure_only_when_the_proxy_is_trusted(
    sqlite_url: str, tmp_path: Path, trusted: bool
) -> None:
    # given the reverse-proxy recipe of docs/security.md: TLS ends at a proxy on this
    # machine, which says so in X-Forwarded-Proto
    args = ["--token-file", str(token_file(tmp_path, TOKENS))]
    if trusted:
        args.append("--behind-proxy")
    with dashboard_process(sqlite_url, *args, log=tmp_path / "dash.log") as base:
        session = _login_body(base, **{"X-Forwarded-Proto": "https"})
    # then the session cookie is Secure only when the dashboard was told to trust it
    assert ("Secure" in session) is trusted


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("10.1.2.3", False), ("dash.example.com", False)],
)  # fmt: skip
def test_loopback_addresses_are_told_apart(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_allowed_hosts_are_localhost_the_bind_address_and_the_ones_named() -> None:
    assert hosts_for("127.0.0.1", ()) == ["localhost", "127.0.0.1", "::1"]
    assert hosts_for("10.1.2.3", ("dash.example.com",)) == [
        "localhost",
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "dash.example.com",
    ]
    import socket

    assert socket.gethostname() in hosts_for("0.0.0.0", ())


def test_bound_beyond_loopback_without_tls_the_command_warns_and_still_needs_a_login(
    sqlite_url: str, ids: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "dash.log"
    args = ("--host", "0.0.0.0", "--token-file", str(token_file(tmp_path, TOKENS)))
    with dashboard_process(sqlite_url, *args, log=log) as base:
        page = _request(base, "GET", f"/jobs/{ids['investigate']}")
        metrics = _request(base, "GET", "/metrics")
        scraped = _request(
            base, "GET", "/metrics", headers={"Authorization": f"Bearer {TOKENS['dan']}"}
        )
    assert "warning: plain HTTP on 0.0.0.0" in log.read_text()
    assert "login?token=" not in log.read_text()  # tokens came from the file
    assert page.status == 303
    assert metrics.status == 401
    assert scraped.status == 200
