"""Worker processes killed with SIGKILL, stopped with SIGSTOP, drained with SIGTERM.

Real `jobfsm worker` processes over a real SQLite file; timings are small (lease
TTL 3 s, heartbeat 0.5 s, sweep 0.5 s) so the whole file stays well under a minute.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from fsm import Engine
from fsm.records import Job
from fsm.service.identity import pid_verdict

from .helpers import Workers, freeze, markers, wait_for


def _expire_entries(engine: Engine, job: Job) -> list[tuple[float, str | None]]:
    return [(e.at, e.error) for e in engine.history(job.id) if e.event == "expire"]


def test_a_killed_workers_job_is_rerun_on_the_same_host_within_two_seconds(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: worker A runs a retry-safe and a retry-unsafe job; lease TTL is 30 s,
    # so nothing but a confirmed death can recover them quickly
    engine = open_engine(store_url)
    safe = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    unsafe = engine.submit("sleep_unsafe", {"dir": str(marks), "first": 60})
    a = workers.start(store_url, ttl=30.0)
    wait_for(lambda: markers(marks, safe.id, "started", 1), 20, "A to start the safe job")
    wait_for(lambda: markers(marks, unsafe.id, "started", 1), 20, "A to start the unsafe job")
    b = workers.start(store_url, ttl=30.0)
    workers.wait_serving(b)

    # when: A is killed with SIGKILL
    killed_at = workers.kill9(a)

    # then: B re-runs the safe job within 2 s (verdict DEAD by pid), and parks the
    # unsafe one in investigate with the reason
    wait_for(lambda: markers(marks, safe.id, "done", 2), 5, "B to re-run the safe job")
    rerun_at = markers(marks, safe.id, "started", 2)[0].stat().st_mtime
    assert rerun_at - killed_at < 2.0
    wait_for(lambda: engine.get(safe.id).state == "succeeded", 5, "safe job to succeed")
    parked = engine.get(unsafe.id)
    assert parked.state == "investigate"
    assert f"pid {a.pid} is gone" in (parked.last_error or "")
    assert engine.get(safe.id).recoveries == 1
    assert not markers(marks, unsafe.id, "started", 2)  # never rerun


def test_a_starting_worker_reclaims_at_once_the_jobs_of_dead_local_processes(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a worker died holding a job (TTL 30 s) and no other worker was running
    engine = open_engine(sqlite_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    a = workers.start(sqlite_url, ttl=30.0)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
    killed_at = workers.kill9(a)

    # when: a new worker starts on the same host
    workers.start(sqlite_url, ttl=30.0)

    # then: its start-up sweep expires the job long before the lease would lapse
    wait_for(lambda: engine.get(job.id).state == "succeeded", 20, "the job to be rerun")
    ((expired_at, reason),) = _expire_entries(engine, job)
    assert expired_at - killed_at < 15.0  # the lease ran until killed_at + 30 s
    assert f"pid {a.pid} is gone" in (reason or "")


def test_another_host_waits_for_the_lease_ttl_before_recovering(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: A on "host-a" runs a job; B poses as "host-b" (cannot check A's pid)
    engine = open_engine(sqlite_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 0})
    a = workers.start(sqlite_url, host_id="host-a", ttl=3.0, heartbeat=0.5)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")
    b = workers.start(sqlite_url, host_id="host-b", ttl=3.0, heartbeat=0.5)
    workers.wait_serving(b)

    # when: A is killed
    killed_at = workers.kill9(a)

    # then: the job is recovered by the lapsed lease: not before TTL minus one
    # heartbeat after the kill, and soon after it
    wait_for(lambda: markers(marks, job.id, "done", 2), 10, "B to re-run the job")
    ((expired_at, reason),) = _expire_entries(engine, job)
    assert expired_at - killed_at >= 3.0 - 0.5 - 0.1
    assert expired_at - killed_at < 3.0 + 2.0
    assert reason == "lease expired"


def test_a_zombie_owners_late_report_changes_nothing_and_the_effect_commits_once(
    store_url: str,
    workers: Workers,
    marks: Path,
    open_engine: Callable[[str], Engine],
    tmp_path: Path,
) -> None:
    # given: A starts a job whose fenced effect it writes after 2 s
    engine = open_engine(store_url)
    effects = tmp_path / "effects.db"
    job = engine.submit("effect", {"dir": str(marks), "first": 2.0, "effects_db": str(effects)})
    a = workers.start(store_url, ttl=3.0, heartbeat=0.5)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "A to start the job")

    # when: A is frozen (SIGSTOP) until its lease lapses and B has re-run the job
    freeze(a, store_url)
    try:
        b = workers.start(store_url, ttl=3.0, heartbeat=0.5)
        workers.wait_serving(b)
        wait_for(lambda: engine.get(job.id).state == "succeeded", 15, "B to complete the job")
    finally:
        a.send_signal(signal.SIGCONT)
    # A wakes up, writes its stale effect and tries to report
    wait_for(lambda: markers(marks, job.id, "effect0", 1), 10, "A's stale effect attempt")
    time.sleep(1.0)

    # then: the effect committed exactly once, under B's fence; A changed nothing
    with sqlite3.connect(effects) as conn:
        rows = conn.execute("SELECT fence, commits, pid FROM effects").fetchall()
    done = engine.get(job.id)
    assert rows == [(2, 1, b.pid)]
    assert done.state == "succeeded"
    assert done.result == {"written": 1, "fence": 2}
    assert done.fence == 2
    stale = [e for e in engine.history(job.id) if e.outcome == "rejected"]
    a_log = workers.log_of(a)
    # A's result is either rejected by the engine (audited) or discarded by A's own
    # heartbeat noticing the lost lease first; both leave the job untouched.
    assert [(e.event, e.fence) for e in stale] == [("succeed", 1)] or "discarded" in a_log
    assert "lease lost" in a_log or stale


def test_a_job_killed_four_times_goes_to_investigate(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a retry-safe job with the default budget of 3 recoveries
    engine = open_engine(sqlite_url)
    job = engine.submit("sleep", {"dir": str(marks), "first": 60, "then": 60})

    # when: each worker that runs it is killed with SIGKILL, four times
    for attempt in range(1, 5):
        w = workers.start(sqlite_url, ttl=30.0)
        wait_for(lambda a=attempt: markers(marks, job.id, "started", a), 20, f"attempt {attempt}")
        workers.kill9(w)
    last = workers.start(sqlite_url, ttl=30.0)

    # then: the fourth recovery parks it in investigate with the reason
    wait_for(lambda: engine.get(job.id).state == "investigate", 20, "investigate")
    parked = engine.get(job.id)
    assert parked.recoveries == 4
    assert parked.attempt == 4
    assert "is gone" in (parked.last_error or "")
    workers.wait_serving(last)
    assert not markers(marks, job.id, "started", 5)


def test_sigterm_under_load_drains_loses_nothing_and_holds_no_lease(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a worker busy with a queue of short jobs
    engine = open_engine(sqlite_url)
    jobs = [
        engine.submit("sleep", {"dir": str(marks), "first": 0.3, "then": 0.3}) for _ in range(40)
    ]
    w = workers.start(sqlite_url, concurrency=4, ttl=3.0)
    workers.wait_serving(w)
    wait_for(lambda: sum(engine.get(j.id).state == "succeeded" for j in jobs) >= 4, 20, "progress")

    # when: it gets SIGTERM
    w.send_signal(signal.SIGTERM)
    code = w.wait(timeout=20)

    # then: it exits cleanly, every job is finished or back in the queue, no lease held
    states = [engine.get(j.id) for j in jobs]
    assert code == 0
    assert not workers.ready_file(w).exists()
    assert {j.state for j in states} <= {"succeeded", "queued"}
    assert all(j.owner is None for j in states)
    assert all(not _expire_entries(engine, j) for j in jobs)
    # and another worker finishes the rest: nothing was lost
    workers.start(sqlite_url, concurrency=4, ttl=3.0)
    wait_for(lambda: all(engine.get(j.id).state == "succeeded" for j in jobs), 30, "all jobs done")


def test_a_second_signal_stops_at_once_and_gives_the_job_up_to_recovery(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a worker running a job that ignores cancellation, with a long drain grace
    engine = open_engine(sqlite_url)
    job = engine.submit("stubborn", {"dir": str(marks), "seconds": 60})
    w = workers.start(sqlite_url, ttl=30.0, shutdown_grace=60.0)
    wait_for(lambda: markers(marks, job.id, "started", 1), 20, "start")

    # when: SIGTERM, then SIGINT
    w.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert w.poll() is None  # draining
    w.send_signal(signal.SIGINT)

    # then: it stops at once, having expired the job with the reason in the audit
    assert w.wait(timeout=10) == 0
    stopped = engine.get(job.id)
    assert stopped.state == "retry_wait"
    assert stopped.recoveries == 1
    assert stopped.last_error == "worker stopped at once"
    assert "stopped at once" in workers.log_of(w)


def test_killing_a_process_executor_worker_takes_its_children_with_it(
    sqlite_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given: a worker on the process executor running a job that ignores cancels
    engine = open_engine(sqlite_url)
    job = engine.submit("stubborn", {"dir": str(marks), "seconds": 60})
    w = workers.start(sqlite_url, executor="process", ttl=30.0)
    wait_for(lambda: markers(marks, job.id, "started", 1), 30, "the child to start the job")
    child = int(markers(marks, job.id, "started", 1)[0].name.rsplit(".", 1)[1])
    assert child != w.pid

    # when: the worker is killed with SIGKILL
    workers.kill9(w)

    # then: its child dies too (no orphan keeps running a job that will be rerun)
    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return pid_verdict(child).dead

    wait_for(gone, 5, "the orphaned child to die")
