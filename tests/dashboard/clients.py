"""Test clients of the dashboard app: anonymous, or logged in as a named operator."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from fsm import Engine
from fsm.dashboard import create_app

BASE = "http://127.0.0.1:8700"
#: operator name -> token, as a token file would give them
TOKENS = {"carol": "carol-token-9f3kQ2xZ7wLp", "dan": "dan-token-Vb81mN4qRt6y"}


def client(engine: Engine, **options: Any) -> TestClient:
    """An anonymous client of a dashboard with TOKENS (unless `options` says otherwise)."""
    if "token" not in options and "tokens" not in options and "authenticator" not in options:
        options["tokens"] = TOKENS
    return TestClient(create_app(engine, **options), base_url=BASE)


def csrf_of(c: TestClient, path: str) -> str:
    page = c.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, "page has no form"
    return found.group(1)


def log_in(c: TestClient, name: str = "carol") -> TestClient:
    """Log `c` in through the form, as an operator's browser would."""
    csrf = csrf_of(c, "/login")
    done = c.post(
        "/login", data={"csrf": csrf, "token": TOKENS[name], "next": ""}, follow_redirects=False
    )
    assert done.status_code == 303, done.text
    return c


def operator(engine: Engine, name: str = "carol", **options: Any) -> TestClient:
    """A client logged in as operator `name`."""
    return log_in(client(engine, **options), name)
