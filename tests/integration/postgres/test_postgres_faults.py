"""Real connection faults: terminated backends and connections cut mid-commit.

The fault proxy (conftest.py) sits between the store and the server and closes
the TCP connection either before a statement reaches the server or after the
server has run (and committed) it but before the answer reaches the client.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from adapters.postgres import open_store, plan
from adapters.postgres.store import COPY_MIN
from fsm.clock import FakeClock
from fsm.errors import TransientStoreError
from fsm.records import Job, Owner
from fsm.service.engine import Engine

pytestmark = pytest.mark.postgres

OWNER = Owner("host-a", 1, "inc-a")
APPLY = b"upd AS (UPDATE"
COMMIT = b"COMMIT"


def _engine(url: str) -> Engine:
    return Engine(open_store(url), clock=FakeClock())


def _leased(engine: Engine) -> Job:
    engine.submit("k", 1)
    [job] = engine.claim(OWNER)
    return job


def _events(admin: Any, job_id: str) -> list[str]:
    rows = admin.all("SELECT event FROM job_events WHERE job_id = %s ORDER BY seq", job_id)
    return [r[0] for r in rows]


def test_a_write_committed_before_the_connection_broke_is_reported_applied(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        job = _leased(engine)
        # given the connection will break after the server ran (and committed) the write
        proxy.arm(APPLY, "deliver_then_drop")
        # when the worker starts the job
        started = engine.start(job.id, job.fence)
        # then the store reconciled: the start is reported, stored once, audited once
        assert proxy.fired.is_set()
        assert started.state == "running"
        assert engine.get(job.id) == started
        assert _events(admin, job.id) == ["submit", "lease", "start"]
    finally:
        engine.store.close()


def test_a_write_the_server_commits_after_the_break_is_reported_applied_not_lost(
    pg_proxy: tuple[Any, str], pg_url: str, admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    locker = psycopg.connect(pg_url)
    try:
        job = _leased(engine)
        # given another session holds the job's row, so the server runs the start's
        # one-statement write only once that session ends, well after the break
        locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        threading.Timer(1.0, locker.rollback).start()
        proxy.arm(APPLY, "deliver_then_drop", settle=0.2)
        # when the worker starts the job and its connection breaks while the write waits
        started = engine.start(job.id, job.fence)
        # then the store waited for the write's server process to end before re-reading:
        # the start committed, and is reported as it is stored (never "not applied")
        assert proxy.fired.is_set()
        assert started.state == "running"
        assert engine.get(job.id) == started
        assert _events(admin, job.id) == ["submit", "lease", "start"]
    finally:
        locker.close()
        engine.store.close()


def test_a_write_whose_server_process_outlives_the_wait_is_reported_unknown(
    pg_proxy: tuple[Any, str], pg_url: str, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    locker = psycopg.connect(pg_url)
    monkeypatch.setattr(plan, "ENDED_POLLS", 3)  # a bound of 3 x 20 ms, not 5 s
    try:
        job = _leased(engine)
        # given the start's write waits for a row lock held longer than the store waits
        locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        proxy.arm(APPLY, "deliver_then_drop", settle=0.2)
        # then the store says it cannot know (it never claims "not applied")
        with pytest.raises(TransientStoreError, match="still running"):
            engine.start(job.id, job.fence)
        # and rightly: once the lock is gone, the write it could not see commits
        locker.rollback()
        assert admin.wait_for(
            "SELECT count(*) FROM job_events WHERE job_id = %s AND event = 'start'", job.id
        )
    finally:
        locker.close()
        engine.store.close()


def test_a_write_lost_with_its_connection_is_a_transient_error_and_changes_nothing(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        job = _leased(engine)
        # given the connection breaks before the write reaches the server
        proxy.arm(APPLY, "drop")
        with pytest.raises(TransientStoreError, match="not applied"):
            engine.start(job.id, job.fence)
        # then nothing changed, and retrying works
        assert proxy.fired.is_set()
        assert engine.get(job.id) == job
        assert _events(admin, job.id) == ["submit", "lease"]
        assert engine.start(job.id, job.fence).state == "running"
    finally:
        engine.store.close()


def test_a_claim_whose_commit_went_through_returns_the_leased_jobs(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        job = engine.submit("k", 1)
        proxy.arm(COMMIT, "deliver_then_drop")
        [leased] = engine.claim(OWNER)
        assert proxy.fired.is_set()
        assert (leased.id, leased.state, leased.fence) == (job.id, "leased", 1)
        assert engine.get(job.id) == leased
        assert _events(admin, job.id) == ["submit", "lease"]
    finally:
        engine.store.close()


def test_a_claim_whose_commit_never_arrived_leases_nothing(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        job = engine.submit("k", 1)
        proxy.arm(COMMIT, "drop")
        with pytest.raises(TransientStoreError):
            engine.claim(OWNER)
        assert proxy.fired.is_set()
        # the server rolled the transaction back when the connection died
        admin.wait_for("SELECT state = 'queued' FROM jobs WHERE id = %s", job.id)
        assert _events(admin, job.id) == ["submit"]
        [again] = engine.claim(OWNER)
        assert (again.id, again.fence) == (job.id, 1)
    finally:
        engine.store.close()


def test_an_insert_committed_before_the_connection_broke_is_not_duplicated(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        proxy.arm(b"ins AS (INSERT", "deliver_then_drop")
        jobs = engine.submit_many([("k", i, {}) for i in range(3)])
        assert proxy.fired.is_set()
        assert admin.one("SELECT count(*) FROM jobs") == 3
        assert admin.one("SELECT count(*) FROM job_events") == 3
        assert [engine.get(j.id) for j in jobs] == jobs
    finally:
        engine.store.close()


def test_a_terminated_backend_surfaces_as_a_transient_error(pg_url: str, admin: Any) -> None:
    engine = _engine(f"{pg_url}?application_name=victim")
    try:
        job = _leased(engine)
        # given another session holds the job's row lock, so the write waits
        admin.conn.execute("BEGIN")
        admin.one("SELECT id FROM jobs WHERE id = %s FOR UPDATE", job.id)
        errors: list[BaseException] = []

        def start() -> None:
            try:
                engine.start(job.id, job.fence)
            except BaseException as err:
                errors.append(err)

        t = threading.Thread(target=start)
        t.start()
        # when an administrator terminates the waiting backend
        pid = admin.wait_for(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'victim' "
            "AND wait_event_type = 'Lock'"
        )
        admin.one("SELECT pg_terminate_backend(%s)", pid)
        t.join(30)
        admin.conn.execute("ROLLBACK")
        # then the caller gets a TransientStoreError and nothing changed
        [err] = errors
        assert isinstance(err, TransientStoreError)
        assert engine.get(job.id) == job
        assert engine.start(job.id, job.fence).state == "running"
    finally:
        engine.store.close()


def test_a_copied_batch_whose_commit_went_through_is_reported_inserted(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        # given a batch large enough to be written with COPY, and a commit whose answer is lost
        proxy.arm(COMMIT, "deliver_then_drop")
        jobs = engine.submit_many([("k", i, {}) for i in range(COPY_MIN)])
        # then the store re-read the rows and reports them inserted, once each
        assert proxy.fired.is_set()
        assert admin.one("SELECT count(*) FROM jobs") == COPY_MIN
        assert admin.one("SELECT count(*) FROM job_events") == COPY_MIN
        assert engine.get(jobs[-1].id) == jobs[-1]
    finally:
        engine.store.close()


def test_a_copied_batch_whose_commit_never_arrived_is_a_transient_error(
    pg_proxy: tuple[Any, str], admin: Any
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        proxy.arm(COMMIT, "drop")
        with pytest.raises(TransientStoreError, match="not applied"):
            engine.submit_many([("k", i, {}) for i in range(COPY_MIN)])
        assert proxy.fired.is_set()
        admin.wait_for("SELECT count(*) = 0 FROM jobs")
        assert admin.one("SELECT count(*) FROM job_events") == 0
    finally:
        engine.store.close()


def test_a_heartbeat_committed_before_the_connection_broke_reports_the_renewal(
    pg_proxy: tuple[Any, str],
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        job = _leased(engine)
        proxy.arm(b"SET lease_until", "deliver_then_drop")
        renewed = engine.heartbeat(OWNER, {job.id: job.fence})
        assert proxy.fired.is_set()
        assert renewed == {job.id: "leased"}
        assert engine.get(job.id).version == job.version + 1
    finally:
        engine.store.close()


def test_a_prune_cut_off_mid_statement_says_its_outcome_is_unknown(
    pg_proxy: tuple[Any, str],
) -> None:
    proxy, url = pg_proxy
    engine = _engine(url)
    try:
        proxy.arm(b"doomed AS", "deliver_then_drop")
        with pytest.raises(TransientStoreError, match="unknown"):
            engine.prune()
        assert proxy.fired.is_set()
        assert engine.prune() == 0  # and pruning again works
    finally:
        engine.store.close()
