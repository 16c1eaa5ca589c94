"""SQLite under hostile conditions: a frozen writer, private files, secrets in URLs,
names with a trailing newline, schema removal, the capacity count's cost."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.sqlite import open_store
from adapters.sqlite.schema import in_list
from adapters.sqlite.sql import waiting_sql
from fsm import Engine, Owner
from fsm.errors import BadStoreURL, StoreError
from fsm.registry import open_store as open_by_url

SENTINEL = "S3cr3t-Sentinel"
BUSY_MS = 1000
#: slack over the busy timeout for a loaded machine (SQLite's busy handler sleeps in steps)
SLACK = 0.6

FREEZER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE jobs SET priority = priority")  # a write, mid-transaction
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)  # frozen while it holds the write lock
conn.execute("COMMIT")
print("committed", flush=True)
"""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.fixture
def frozen_writer(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A store file and a child process frozen (SIGSTOP) inside a write transaction."""
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}?busy_timeout_ms={BUSY_MS}"
    store = open_store(url)
    Engine(store).submit("k", 1)
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-c", FREEZER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        deadline = time.monotonic() + 10
        while not _stopped(child.pid):
            assert time.monotonic() < deadline, "the writer never stopped"
            time.sleep(0.01)
        yield url, child
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_a_frozen_writer_makes_writers_fail_retryably_within_the_busy_timeout(
    frozen_writer: tuple[str, subprocess.Popen[str]],
) -> None:
    url, child = frozen_writer
    store = open_store(url)
    try:
        engine = Engine(store)
        results: list[tuple[float, BaseException | None]] = []

        def submit() -> None:
            started = time.monotonic()
            try:
                engine.submit("k", 2)
            except BaseException as err:  # asserted below
                results.append((time.monotonic() - started, err))
            else:
                results.append((time.monotonic() - started, None))

        # given a writer frozen in its transaction, when two threads of this process
        # write at once, then each fails within the busy timeout (the two waits, for
        # this process's writer lock and for SQLite's, share one bound), retryably
        threads = [threading.Thread(target=submit) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(results) == 2
        for elapsed, err in results:
            assert isinstance(err, StoreError), f"expected a StoreError, got {err!r}"
            assert err.retryable, f"a busy store must be retryable: {err!r}"
            assert "locked" in str(err)
            assert elapsed <= BUSY_MS / 1000 + SLACK, f"waited {elapsed:.2f} s for a lock"
        # readers are not blocked by the frozen writer (WAL)
        assert sum(store.counts().values()) == 1
        # when the writer resumes, the same write succeeds
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=10) == 0
        assert engine.submit("k", 3).state == "queued"
        assert sum(store.counts().values()) == 2
    finally:
        store.close()


def test_a_new_database_and_its_wal_and_shm_files_are_readable_by_the_owner_only(
    tmp_path: Path,
) -> None:
    old = os.umask(0o022)
    try:
        store = open_store(f"sqlite:///{tmp_path / 'private.db'}")
        try:
            Engine(store).submit("k", 1)
            for name in ("private.db", "private.db-wal", "private.db-shm"):
                mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
                assert mode == 0o600, f"{name} has mode {oct(mode)}"
        finally:
            store.close()
    finally:
        os.umask(old)


def test_a_database_in_a_missing_directory_is_a_store_error_naming_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing" / "jobs.db"
    with pytest.raises(StoreError, match="unable to open") as info:
        open_store(f"sqlite:///{path}")
    assert str(path) in str(info.value)


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch(mode=0o640)
    os.chmod(path, 0o640)
    open_store(f"sqlite:///{path}").close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize(
    "url",
    [
        f"sqlite://user:{SENTINEL}@host/jobs.db",
        f"sqlite:///jobs.db?password={SENTINEL}",
        f"sqlite:///jobs.db?busy_timeout_ms=1&password={SENTINEL}%zz",
        f"sqlite:///jobs.db?x&password={SENTINEL}",
        f"sqlite:user:{SENTINEL}@host/jobs.db",
        f"sqlite:///jobs.db?password={SENTINEL}#frag",
    ],
)
def test_no_sqlite_url_error_shows_a_password(url: str) -> None:
    for opener in (open_store, open_by_url):
        with pytest.raises(BadStoreURL) as info:
            opener(url)
        chain: list[BaseException] = []
        err: BaseException | None = info.value
        while err is not None:
            chain.append(err)
            err = err.__cause__ or err.__context__
        for e in chain:
            assert SENTINEL not in str(e), f"{url} -> {e!r}"
            assert SENTINEL not in repr(e), f"{url} -> {e!r}"


def test_a_state_name_that_ends_in_a_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="state name"):
        in_list(["queued\n"])


def test_the_capacity_count_walks_an_index_and_stops_at_the_limit(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'plan.db'}")
    try:
        conn = sqlite3.connect(store.path)
        sql = waiting_sql(("queued", "retry_wait"))
        plan = " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("default", 6)))
        conn.close()
        assert "USING COVERING INDEX jobs_queue_state" in plan, plan
        assert "SCAN jobs" not in plan.replace("SCAN jobs USING", ""), plan
    finally:
        store.close()


def test_drop_schema_removes_the_file_with_its_wal_and_shm(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    store = open_store(f"sqlite:///{path}")
    engine = Engine(store)
    job = engine.submit("k", 1)
    engine.claim(Owner("h", 1, "i"), queues=[job.queue])
    assert store.drop_schema() == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_drop_schema_keeps_a_file_that_holds_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "mixed.db"
    store = open_store(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.commit()
    conn.close()
    assert store.drop_schema() == ("mine",)
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert "mine" in tables
    assert not tables & {"jobs", "job_events", "schema_version"}
