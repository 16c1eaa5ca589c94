"""Real processes on one SQLite file: kill -9 durability and write-lock contention."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adapters.sqlite import SCHEMA_VERSION, open_store
from fsm import Engine, Owner

#: bound on any child process in this module
CHILD_TIMEOUT = 120.0

COMMIT_THEN_HANG = textwrap.dedent(
    """
    import os, sqlite3, sys, time
    from fsm import Engine, Owner, open_store
    from adapters.sqlite import parse_url

    url = sys.argv[1]
    engine = Engine(open_store(url))
    job = engine.submit("k", {"x": 1})
    (job,) = engine.claim(Owner("h", os.getpid(), "i"), ids=[job.id])
    job = engine.start(job.id, job.fence)
    job = engine.succeed(job.id, job.fence, {"ok": True})
    # an uncommitted write still in flight when the process is killed
    raw = sqlite3.connect(parse_url(url).path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("UPDATE jobs SET state = 'queued', version = 999")
    print(job.id, flush=True)
    time.sleep(CHILD_TIMEOUT)
    """
).replace("CHILD_TIMEOUT", str(CHILD_TIMEOUT))

LIFECYCLES = textwrap.dedent(
    """
    import json, os, sys
    from fsm import Engine, Owner, open_store

    engine = Engine(open_store(sys.argv[1]))
    me = Owner("h", os.getpid(), sys.argv[3])
    done = 0

    def work_one():
        global done
        got = engine.claim(me, limit=1)
        for job in got:
            job = engine.start(job.id, job.fence)
            engine.succeed(job.id, job.fence, {"by": me.incarnation})
            done += 1
        return bool(got)

    for i in range(int(sys.argv[2])):
        engine.submit("k", {"i": i})
        work_one()
    empty = 0
    while empty < 3:
        empty = 0 if work_one() else empty + 1
    print(json.dumps({"done": done}))
    """
)


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_committed_transition_survives_kill_9_of_the_process_that_made_it(
    sqlite_url: str,
) -> None:
    # given a process that committed a full lifecycle and holds an open write
    child = _python(COMMIT_THEN_HANG, sqlite_url)
    try:
        assert child.stdout is not None
        job_id = child.stdout.readline().strip()
        assert job_id, child.stderr.read() if child.stderr else ""
        # when it is killed with SIGKILL
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == -signal.SIGKILL
    # then the committed job is there, the uncommitted write is not, and the file is writable
    store = open_store(sqlite_url)
    try:
        job = store.get(job_id)
        assert job is not None
        assert (job.state, job.version, job.result) == ("succeeded", 4, {"ok": True})
        assert [e.event for e in store.history(job_id)] == ["submit", "lease", "start", "succeed"]
        engine = Engine(store)
        again = engine.submit("k", {"after": "kill"})
        (leased,) = engine.claim(Owner("h2", 2, "j"))
        assert leased.id == again.id
    finally:
        store.close()


def test_processes_contending_for_the_write_lock_never_see_database_is_locked(
    sqlite_url: str,
) -> None:
    # given one migrated file and four processes each submitting and working jobs
    # (a generous busy timeout: a loaded CI machine may starve a waiter for seconds;
    # what must never happen is SQLITE_BUSY without waiting, as a read transaction
    # upgraded to a write would get)
    sqlite_url += "?busy_timeout_ms=60000"
    open_store(sqlite_url).close()
    per_child, processes = 50, 4
    children = [_python(LIFECYCLES, sqlite_url, str(per_child), f"p{n}") for n in range(processes)]
    done = 0
    try:
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT)
            # then no child failed (no "database is locked" under the busy timeout)
            assert child.returncode == 0, err[-3000:]
            assert "locked" not in err
            done += json.loads(out)["done"]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    # and every job ran exactly once, with a complete audit trail
    total = per_child * processes
    assert done == total
    store = open_store(sqlite_url)
    try:
        assert store.counts() == {("default", "succeeded"): total}
        conn = sqlite3.connect(store.path)
        try:
            per_event = dict(conn.execute("SELECT event, COUNT(*) FROM job_events GROUP BY event"))
        finally:
            conn.close()
        assert per_event == {"submit": total, "lease": total, "start": total, "succeed": total}
    finally:
        store.close()


def test_a_forked_child_opens_its_own_connection(sqlite_url: str, tmp_path: Path) -> None:
    # given a store already used in this process
    store = open_store(sqlite_url)
    engine = Engine(store)
    job = engine.submit("k", 1)
    # when a forked child uses the same store object
    pid = os.fork()
    if pid == 0:  # child: claim through the inherited object, report, exit hard
        code = 1
        try:
            (leased,) = Engine(store).claim(Owner("child", os.getpid(), "c"))
            code = 0 if leased.id == job.id else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    # then the child's claim committed and the parent's connection still works
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        stored = store.get(job.id)
        assert stored is not None
        assert stored.state == "leased"
        assert stored.owner is not None
        assert stored.owner.host == "child"
    finally:
        store.close()


SUBMIT_ONE_KEY = textwrap.dedent(
    """
    import sys
    from fsm import Engine, open_store

    store = open_store(sys.argv[1])  # a fresh file: every child races to migrate it
    job = Engine(store).submit("k", {"by": sys.argv[2]}, idempotency_key="the-key")
    print(job.id)
    """
)


def test_processes_opening_a_new_file_and_submitting_one_key_make_one_job(
    sqlite_url: str,
) -> None:
    # given four processes that open a file nobody created yet and submit one key
    children = [_python(SUBMIT_ONE_KEY, sqlite_url, f"p{n}") for n in range(4)]
    ids = []
    try:
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT)
            assert child.returncode == 0, err[-3000:]
            ids.append(out.strip())
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    # then every process got the same job, stored once, and the schema was applied once
    assert len(set(ids)) == 1
    store = open_store(sqlite_url)
    try:
        assert store.counts() == {("default", "queued"): 1}
        assert [e.event for e in store.history(ids[0])] == ["submit"]
        versions = (
            store.thread_connection().execute("SELECT version FROM schema_version").fetchall()
        )
        assert [v[0] for v in versions] == list(range(1, SCHEMA_VERSION + 1))
    finally:
        store.close()


@pytest.mark.parametrize("held", ["_writer", "_lock"])
def test_a_child_forked_while_a_parent_thread_holds_a_store_lock_can_write(
    tmp_path: Path, held: str
) -> None:
    # given a store whose writer queue or connection registry lock a thread holds
    store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}?busy_timeout_ms=2000")
    job = Engine(store).submit("k", 1)
    lock = getattr(store, held)
    lock.acquire()
    try:
        # when the process forks and the child writes through the same store object
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                (leased,) = Engine(store).claim(Owner("child", os.getpid(), "c"))
                code = 0 if leased.id == job.id else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        lock.release()
    # then the child did not wait on a lock that nobody in it will ever release
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        stored = store.get(job.id)
        assert stored is not None
        assert stored.state == "leased"
    finally:
        store.close()
