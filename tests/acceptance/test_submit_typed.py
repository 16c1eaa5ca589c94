"""`jobfsm submit --app MODULE` checks a payload by the type its kind's handler declares
(docs/typed-payloads.md): a payload that does not fit is refused with one line naming
the field and the exit status of bad input, and nothing is stored; one that fits is
stored as the type serializes it. Without --app, submit stores the payload unchecked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsm import open_store
from fsm.payloads import from_data, to_data
from tests.integration.worker.typed_app import Email

from ._cli import ROOT, ok_here, ok_json_here, one_line_error, run_cli

APP = ("--app", "tests.integration.worker.typed_app")
BAD_INPUT = 2


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


def _payload(url: str, job_id: str) -> object:
    """The payload of `job_id` as stored (read back from the store, not from the CLI)."""
    store = open_store(url)
    try:
        job = store.get(job_id)
        assert job is not None
        return json.loads(job.payload_json)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"to": 5, "subject": "hi"}, "field 'to': invalid value for type, expected str"),
        ({"to": "a@example.com", "subjekt": "hi"}, "field 'subject': required field missing"),
        (
            {"to": "a@example.com", "subject": "hi", "address": {"city": "Berlin"}},
            "field 'address.zip': required field missing",
        ),
        ({"to": "a@example.com", "subject": "hi", "tags": "ab"}, "field 'tags'"),
    ],
)
def test_a_payload_that_does_not_fit_the_kinds_type_is_refused_and_not_stored(
    sqlite_url: str, payload: object, named: str
) -> None:
    ok_here("migrate", sqlite_url)
    done = run_cli(
        *("submit", "email.send", "--payload", json.dumps(payload)),
        *("--store", sqlite_url, *APP),
        cwd=ROOT,
    )
    assert done.returncode == BAD_INPUT
    line = one_line_error(done)
    assert "payload of 'email.send' does not fit Email" in line
    assert named in line
    assert ok_json_here("status", "--store", sqlite_url)["counts"] == {}


def test_submit_with_app_stores_the_typed_serialization_and_without_it_stores_as_given(
    url: str,
) -> None:
    ok_here("migrate", url)
    given = {"to": "a@example.com", "subject": "hi", "at": "2026-01-02T03:04:05+00:00"}
    # when a payload that fits is submitted with --app
    job = ok_json_here(
        "submit", "email.send", "--payload", json.dumps(given), "--store", url, *APP, cwd=ROOT
    )
    # then it is stored as the type serializes it: its defaults filled in
    stored = _payload(url, job["job"]["id"])
    assert stored == to_data(Email, from_data(Email, given))
    assert (stored["attempts"], stored["tags"], stored["address"]) == (1, [], None)
    # a bad one is refused on this store too, storing nothing
    bad = {"to": 5, "subject": "hi"}
    done = run_cli(
        *("submit", "email.send", "--payload", json.dumps(bad), "--store", url, *APP), cwd=ROOT
    )
    assert done.returncode == BAD_INPUT
    assert "field 'to'" in one_line_error(done)
    assert sum(ok_json_here("status", "--store", url)["counts"]["default"].values()) == 1
    # without --app the same bad payload is stored unchecked, as before
    unchecked = ok_json_here("submit", "email.send", "--payload", json.dumps(bad), "--store", url)
    assert _payload(url, unchecked["job"]["id"]) == bad


def test_an_app_without_a_handler_for_the_kind_is_refused_by_name(sqlite_url: str) -> None:
    ok_here("migrate", sqlite_url)
    done = run_cli("submit", "email.sned", "--store", sqlite_url, *APP, cwd=ROOT)
    assert done.returncode == BAD_INPUT
    line = one_line_error(done)
    assert "has no handler for kind 'email.sned'" in line
    assert "email.send" in line
    assert ok_json_here("status", "--store", sqlite_url)["counts"] == {}
