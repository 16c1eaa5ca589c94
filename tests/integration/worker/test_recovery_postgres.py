"""Cross-host death on PostgreSQL: confirmed through the liveness advisory lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from fsm import Engine, Identity, Worker
from fsm.records import Job, Owner

from .app import handlers
from .helpers import Workers, markers, wait_for

LIVENESS_CLASS = 0x4A464C56  # adapters.postgres.migrations.LIVENESS_CLASS


def _liveness_backend(pg_url: str, owner: Owner | None) -> int:
    """The server pid of the session holding `owner`'s liveness lock."""
    from adapters.postgres.migrations import key32

    assert owner is not None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::int = %s "
            "AND objid::bigint = %s AND granted",
            (LIVENESS_CLASS, key32(owner.incarnation) & 0xFFFFFFFF),
        ).fetchone()
    assert row is not None, f"no liveness lock held for {owner}"
    return int(row[0])


def _terminate(pg_url: str, backend: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (backend,))


def _trail(engine: Engine, job: Job) -> str:
    """The job's audit trail, one line per entry: who leased it, who recovered it, why."""
    lines = []
    for e in engine.history(job.id):
        owner = e.data.get("owner") if e.event == "lease" else None
        by = f" by {owner['host']}/{owner['incarnation'][:8]}" if owner else ""
        lines.append(
            f"{e.version} {e.event} {e.from_state}->{e.to_state} fence {e.fence} "
            f"attempt {e.attempt}{by} [{e.code}] {e.reason or ''}"
        )
    return "\n".join(lines)


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
    _terminate(pg_url, _liveness_backend(pg_url, leased.owner))

    # then: another owner takes the job over and completes it (B, or A itself once it
    # holds a new token as a new incarnation); A's first run stopped and reported
    # nothing (no rejected report in the trail, no "done" marker for attempt 1)
    wait_for(lambda: engine.get(job.id).state == "succeeded", 10, "the job to complete")
    wait_for(lambda: "liveness connection lost" in workers.log_of(a), 10, "A to notice")
    done = engine.get(job.id)
    assert done.result is not None
    assert done.result["attempt"] == 2, _trail(engine, job)
    assert done.result["pid"] in (a.pid, b.pid)
    leases = [e for e in engine.history(job.id) if e.event == "lease"]
    assert leased.owner is not None
    assert leases[-1].data["owner"]["incarnation"] != leased.owner.incarnation
    assert [e for e in engine.history(job.id) if e.outcome == "rejected"] == []
    assert not markers(marks, job.id, "done", 1)
    assert a.poll() is None  # A lives on, under a new incarnation
    wait_for(lambda: "liveness token taken as incarnation" in workers.log_of(a), 10, "A back")


def test_a_worker_that_lost_its_liveness_while_waiting_for_work_leases_nothing_under_it(
    pg_url: str, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: an idle worker whose claim loop waits in a long poll (only new work, or a
    # recovery of this worker's sweep, wakes it)
    engine = open_engine(pg_url)
    worker = Worker(
        engine,
        handlers,
        concurrency=1,
        poll_interval=60.0,
        install_signals=False,
        identity=Identity(),
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: worker.ready, 20, "the worker to serve")
        time.sleep(1.0)  # its first claim found nothing: it waits in the poll now
        lost = worker.owner

        # when: the server ends its liveness session, and work arrives once the worker
        # knows the token is lost but before its claim loop wakes up
        _terminate(pg_url, _liveness_backend(pg_url, lost))
        wait_for(lambda: not worker.ready, 5, "the worker to notice the lost token")
        job = engine.submit("sleep", {"dir": str(marks), "first": 0, "then": 0})

        # then: the job is leased under the new token only and runs once: nothing was
        # leased under the lost token (and left to recovery, spending an attempt)
        wait_for(lambda: engine.get(job.id).state == "succeeded", 15, "the job to complete")
    finally:
        worker.stop()
        t.join(15)
    trail = _trail(engine, job)
    leased_by = [
        e.data["owner"]["incarnation"] for e in engine.history(job.id) if e.event == "lease"
    ]
    assert lost.incarnation not in leased_by, trail
    assert [e.event for e in engine.history(job.id)] == ["submit", "lease", "start", "succeed"], (
        trail
    )
    done = engine.get(job.id)
    assert done.result is not None
    assert (done.result["attempt"], done.recoveries) == (1, 0), trail
    assert not t.is_alive()
