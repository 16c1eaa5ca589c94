"""Cross-host death on PostgreSQL: confirmed through the liveness advisory lock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg

from fsm import Engine
from fsm.records import Job

from .helpers import Workers, markers, wait_for

LIVENESS_CLASS = 0x4A464C56  # adapters.postgres._schema.LIVENESS_CLASS


def _liveness_backend(pg_url: str, job: Job) -> int:
    """The server pid of the session holding the liveness lock of the job's owner."""
    from adapters.postgres._schema import key32

    assert job.owner is not None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::int = %s "
            "AND objid::bigint = %s AND granted",
            (LIVENESS_CLASS, key32(job.owner.incarnation) & 0xFFFFFFFF),
        ).fetchone()
    assert row is not None, f"no liveness lock held for {job.owner}"
    return int(row[0])


def test_another_host_recovers_a_killed_owner_within_two_seconds_via_liveness(
    pg_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: A ("host-a") runs a job under a 30 s lease; B poses as "host-b"
    engine = open_engine(pg_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    a = workers.start(pg_url, host_id="host-a", ttl=30.0)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
    b = workers.start(pg_url, host_id="host-b", ttl=30.0)
    workers.wait_serving(b)

    # when: A is killed
    killed_at = workers.kill9(a)

    # then: B confirms the death through the free advisory lock and re-runs the job
    wait_for(lambda: markers(marks, job.id, "started", 2), 5, "B to re-run the job")
    rerun_at = markers(marks, job.id, "started", 2)[0].stat().st_mtime
    assert rerun_at - killed_at < 2.0
    expire = next(e for e in engine.history(job.id) if e.event == "expire")
    assert "liveness token is free" in (expire.error or "")


def test_a_worker_that_loses_its_liveness_connection_stops_and_never_reports(
    pg_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: A ("host-a") runs a job; B ("host-b") is ready
    engine = open_engine(pg_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 15, "then": 0.2})
    a = workers.start(pg_url, host_id="host-a", ttl=30.0)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
    b = workers.start(pg_url, host_id="host-b", ttl=30.0)
    workers.wait_serving(b)
    leased = engine.get(job.id)

    # when: the server terminates A's liveness session
    backend = _liveness_backend(pg_url, leased)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend,))

    # then: another owner takes the job over and completes it (B, or A itself once it
    # holds a new token as a new incarnation); A's first run stopped and reported
    # nothing (no rejected report in the trail, no "done" marker for attempt 1)
    wait_for(lambda: engine.get(job.id).state == "succeeded", 10, "the job to complete")
    wait_for(lambda: "liveness connection lost" in workers.log_of(a), 10, "A to notice")
    done = engine.get(job.id)
    assert done.result is not None
    assert done.result["attempt"] == 2
    assert done.result["pid"] in (a.pid, b.pid)
    leases = [e for e in engine.history(job.id) if e.event == "lease"]
    assert leased.owner is not None
    assert leases[-1].data["owner"]["incarnation"] != leased.owner.incarnation
    assert [e for e in engine.history(job.id) if e.outcome == "rejected"] == []
    assert not markers(marks, job.id, "done", 1)
    assert a.poll() is None  # A lives on, under a new incarnation
    wait_for(lambda: "liveness token taken as incarnation" in workers.log_of(a), 10, "A back")
