"""`jobfsm status` names the worker that runs automatic retention (docs/retention.md):
the holder of the store's `retention` service lease and until when, or none, in the
plain and the JSON output, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fsm import open_store
from fsm.ports import LeasesServices
from fsm.service.maintenance.retention import LEASE_NAME

from ._cli import ok_here, ok_json_here

HOLDER = "host-a/pid 4242/1f2e3d4c"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


def _take(url: str, owner: str, now: float, until: float) -> None:
    store = open_store(url)
    try:
        assert isinstance(store, LeasesServices)
        assert store.take_service_lease(LEASE_NAME, owner, now, until)
    finally:
        store.close()


def _release(url: str, owner: str) -> None:
    store = open_store(url)
    try:
        assert isinstance(store, LeasesServices)
        assert store.release_service_lease(LEASE_NAME, owner)
    finally:
        store.close()


def test_status_names_the_retention_lease_holder_until_when_or_none(url: str) -> None:
    # given a store nobody ran retention on
    ok_here("migrate", url)
    assert ok_here("status", "--store", url).splitlines()[-1] == "retention lease: none"
    assert ok_json_here("status", "--store", url)["retention_lease"] is None

    # when a worker holds the lease for ten minutes
    now = time.time()
    _take(url, HOLDER, now, now + 600.0)
    # then status names it and the time its lease ends
    line = ok_here("status", "--store", url).splitlines()[-1]
    assert line.startswith(f"retention lease: held by {HOLDER} until 20"), line
    assert "(in 9." in line or "(in 10.0m)" in line, line
    lease = ok_json_here("status", "--store", url)["retention_lease"]
    assert lease == {"owner": HOLDER, "until": pytest.approx(now + 600.0), "held": True}

    # when its lease ran out (the worker was killed), nobody holds it
    _take(url, "host-b/pid 7/aa", now + 700.0, now - 60.0)  # a handover, already ended
    line = ok_here("status", "--store", url).splitlines()[-1]
    assert line.startswith("retention lease: none (the last holder, host-b/pid 7/aa, lost it")
    assert ok_json_here("status", "--store", url)["retention_lease"]["held"] is False

    # when the last holder gave it up (a worker stopped), it is none again
    _release(url, "host-b/pid 7/aa")
    assert ok_here("status", "--store", url).splitlines()[-1] == "retention lease: none"
    assert ok_json_here("status", "--store", url)["retention_lease"] is None
