"""How the SQLite store writes a claim's decided records: the changed columns only,
grouped by the set of columns each lease changed, every job as the core decided it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from adapters.sqlite import SqliteStore, open_store
from fsm import Engine, FakeClock, Owner
from fsm.errors import StoreError
from fsm.records import Job

OWNER = Owner("host", 1, "inc")
#: columns no lease or start changes; the jobs_due and jobs_queue_state indexes cover two
UNCHANGED = ("kind", "queue", "payload_json", "created_at", "priority", "idempotency_key")


@pytest.fixture
def store(sqlite_url: str) -> Iterator[SqliteStore]:
    s = open_store(sqlite_url)
    yield s
    s.close()


def _start_all_but(skipped: str) -> Any:
    def start(job: Job) -> Mapping[str, Any]:
        if job.id == skipped:
            raise RuntimeError("this one stays leased")
        return {}

    return start


def test_a_claim_writes_each_job_as_decided_when_their_changed_columns_differ(
    store: SqliteStore,
) -> None:
    # given three due jobs, the middle one's start refused (a lease alone changes
    # fewer columns than a lease and a start)
    engine = Engine(store, clock=FakeClock())
    a, b, c = (engine.submit("k", i) for i in range(3))
    # when one claim takes all three
    claimed = engine.claim(OWNER, limit=3, start=_start_all_but(b.id))
    # then each stored job is the record the core decided, with its entries
    assert {j.id: j.state for j in claimed} == {a.id: "running", b.id: "leased", c.id: "running"}
    for job in claimed:
        assert store.get(job.id) == job
    assert [e.event for e in store.history(a.id)] == ["submit", "lease", "start"]
    assert [e.event for e in store.history(b.id)] == ["submit", "lease"]


def test_a_claim_of_several_jobs_sets_only_the_columns_the_leases_change(
    store: SqliteStore,
) -> None:
    # given a log of every UPDATE that sets a column no lease changes
    conn = store.thread_connection()
    conn.execute("CREATE TABLE touched (id TEXT)")
    conn.execute(
        f"CREATE TRIGGER jobs_touched AFTER UPDATE OF {', '.join(UNCHANGED)} ON jobs "
        "BEGIN INSERT INTO touched VALUES (new.id); END"
    )
    engine = Engine(store, clock=FakeClock())
    ids = {engine.submit("k", i).id for i in range(4)}
    # when one claim leases and starts them all
    claimed = engine.claim(OWNER, limit=4, start=lambda job: {})
    # then they are running, and no statement set (and so re-indexed) the other columns
    assert {j.id for j in claimed} == ids
    assert {store.get(i).state for i in ids} == {"running"}  # type: ignore[union-attr]
    assert conn.execute("SELECT id FROM touched").fetchall() == []


def test_a_claim_whose_writes_do_not_all_land_is_refused_and_rolled_back(
    store: SqliteStore,
) -> None:
    # given a trigger that silently skips the write of one job
    engine = Engine(store, clock=FakeClock())
    jobs = [engine.submit("k", i) for i in range(3)]
    conn = store.thread_connection()
    conn.execute(
        f"CREATE TRIGGER skip_one BEFORE UPDATE ON jobs WHEN old.id = '{jobs[1].id}' "
        "BEGIN SELECT RAISE(IGNORE); END"
    )
    # when a claim takes all three, then it fails naming what happened
    with pytest.raises(StoreError, match="1 of 3 claimed jobs were not written"):
        engine.claim(OWNER, limit=3, start=lambda job: {})
    # and nothing of it is kept
    assert {store.get(j.id) for j in jobs} == set(jobs)
    assert all([e.event for e in store.history(j.id)] == ["submit"] for j in jobs)
