"""A `jobfsm faults` run on PostgreSQL works in a scratch schema of its own and drops it
on every way out, a failed run included (docs/fault-suites.md): a run that failed
once left its schema (626 jobs) behind on a shared server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from fsm import Engine
from fsm.cli.faults_parallel import sigterm_ends_run
from fsm.testing.faults import fresh_stores, run_faults

pytestmark = pytest.mark.postgres


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'jobfsm_faults_%'"
        ).fetchall()
    return {r[0] for r in rows}


class _ModelFailed(Exception):
    pass


def _failing_run(server: str, url: str, made: set[str]) -> None:
    """A run on `url` that writes jobs in its fresh stores, then fails (an invariant
    broke); `made` gets the schemas that appeared on `server` meanwhile."""
    before = _schemas(server)
    with fresh_stores(url) as opener:
        store = opener()
        made |= _schemas(server) - before
        Engine(store).submit_many([("k", {"n": i}, {}) for i in range(20)])
        assert sum(Engine(opener()).counts().values()) == 20
        raise _ModelFailed("an invariant broke")


def test_a_faults_run_that_fails_midway_drops_the_schema_it_made(pg_url: str) -> None:
    # given a run's fresh stores on a new scratch schema, with jobs written in it
    before = _schemas(pg_url)
    made: set[str] = set()
    # when the model fails midway
    with pytest.raises(_ModelFailed):
        _failing_run(pg_url, pg_url, made)
    # then it had worked in one schema of its own, and that schema is gone
    assert len(made) == 1
    assert _schemas(pg_url) == before


def test_a_faults_run_on_a_named_schema_drops_only_that_schema(pg_url: str) -> None:
    # given another schema on the server that the run did not make
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA jobfsm_faults_not_mine")
    try:
        # when a run on its own named schema fails
        made: set[str] = set()
        with pytest.raises(_ModelFailed):
            _failing_run(pg_url, f"{pg_url}?schema=jobfsm_faults_mine", made)
        # then the run's schema is dropped and the other one kept
        assert made == {"jobfsm_faults_mine"}
        assert _schemas(pg_url) == {"jobfsm_faults_not_mine"}
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS jobfsm_faults_not_mine CASCADE")


def test_a_transactions_run_leaves_no_schema_behind(pg_url: str) -> None:
    # given a server (the test's own database) with no scratch schema of a run
    before = _schemas(pg_url)
    # when the transactions model runs alone, which makes a caller's table of its own
    report = run_faults(pg_url, models=["transactions"], machine=False, size="quick")
    # then it held, and its schema went with the table: nothing left, nothing to say
    assert report.ok, report.failure
    assert report.checks, "the transactions model ran no check"
    assert _schemas(pg_url) == before
    assert not [n for n in report.notes if "left schema" in n], report.notes


def test_a_schema_kept_for_tables_jobfsm_did_not_make_is_named_in_a_note(pg_url: str) -> None:
    # given a run's named schema that also holds a table of someone else's
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA jobfsm_faults_shared")
        conn.execute("CREATE TABLE jobfsm_faults_shared.theirs (x int)")
    notes: list[str] = []
    # when the run's stores are dropped
    with fresh_stores(f"{pg_url}?schema=jobfsm_faults_shared", notes) as opener:
        Engine(opener()).submit("k", 1)
    # then the schema stays with their table, and a note says so by name
    assert _schemas(pg_url) == {"jobfsm_faults_shared"}
    assert notes == [
        "left schema 'jobfsm_faults_shared' behind: it holds tables jobfsm did not make (theirs)"
    ]


def test_a_one_process_run_ended_by_sigterm_drops_its_schema(pg_url: str) -> None:
    # given a default-size run of the machine in one process on the test's own database
    # (minutes of work; the machine opens its stores first, where a whole run starts with
    # the policy model, which needs none: 21 s at load 5, over a minute at load 13)
    cmd = [sys.executable, "-m", "fsm.cli", "faults", "--store", pg_url, "--jobs", "1"]
    cmd += ["--model", "machine"]
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _schemas(pg_url) and run.poll() is None:
            time.sleep(0.2)
        if run.poll() is not None:
            pytest.fail(f"the run ended ({run.returncode}) before SIGTERM: {_err(run)}")
        assert _schemas(pg_url), "the run made no scratch schema within 120 s"
        time.sleep(2)  # well inside the run: its stores open, examples under way
        assert run.poll() is None, "the run ended before it was sent SIGTERM"
        # when it is sent SIGTERM
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=60)
        # then its schema is gone, and it ended with SIGTERM's status
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _schemas(pg_url):
            time.sleep(0.2)
        assert _schemas(pg_url) == set()
        assert run.returncode == 128 + signal.SIGTERM, err.decode()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        assert run.stderr is not None
        run.stderr.close()  # left open, it warned (ResourceWarning) in a later test


def _err(run: subprocess.Popen[bytes]) -> str:
    _, err = run.communicate()
    return err.decode(errors="replace")[-2000:]


def _pipeline_under_sigterm(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    with sigterm_ends_run(), conn.pipeline():
        conn.execute("BEGIN")
        conn.execute("SELECT pg_sleep(3)")
        conn.execute("COMMIT")


def test_sigterm_while_a_pipeline_ends_is_sigterm_not_a_store_error(pg_url: str) -> None:
    # given a run's SIGTERM handler, in the main thread (where a handler can be set;
    # elsewhere the signal would end this test process)
    assert threading.current_thread() is threading.main_thread()
    conn = psycopg.connect(pg_url)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        # when SIGTERM comes while a pipeline waits for the server as it ends (as a
        # claim's does): before, psycopg replaced the signal's exception with "cannot
        # exit pipeline mode while busy", which the store reports as a transient error
        timer.start()
        with pytest.raises(SystemExit) as ended:
            _pipeline_under_sigterm(conn)
        # then the run ends with SIGTERM's status, and the connection (its statement
        # cancelled) still works for the run's clean-up
        assert ended.value.code == 128 + signal.SIGTERM
        conn.rollback()
        assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        timer.cancel()
        conn.close()


def test_the_machine_forgets_its_own_queue_and_nothing_else(pg_url: str) -> None:
    # given: one schema with jobs, trails and prerequisites in two queues, some held
    from adapters.postgres.testing import queue_forgetter
    from fsm import Owner, open_store

    store = open_store(f"{pg_url}?schema=forget")
    engine = Engine(store)
    mine = engine.submit("k", 1, queue="example")
    engine.submit("k", 2, queue="example", after=[mine.id])
    engine.claim(Owner(host="h", pid=1, incarnation="i"), ["example"], limit=1)
    theirs = engine.submit("k", 3, queue="other")
    engine.submit("k", 4, queue="other", after=[theirs.id])
    forget = queue_forgetter(store)
    assert forget is not None

    # when: the example's queue is forgotten (the fault machine's clean-up)
    forget("example")

    # then: none of its jobs, audit entries or prerequisite rows is left; the other
    # queue's are all there
    with psycopg.connect(pg_url, autocommit=True) as conn:
        count = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert count("SELECT count(*) FROM forget.jobs WHERE queue = 'example'") == 0
        assert count("SELECT count(*) FROM forget.jobs WHERE queue = 'other'") == 2
        assert (
            count(
                "SELECT count(*) FROM forget.job_events e LEFT JOIN forget.jobs j "
                "ON j.id = e.job_id WHERE j.id IS NULL"
            )
            == 0
        )
        assert count("SELECT count(*) FROM forget.job_deps") == 1
    assert engine.get(theirs.id).queue == "other"
    store.close()
