"""The time a SQLite claim records is read once the claim holds the write lock: a claim
that waited for another writer does not record a lease before that writer let go.

Real contention on one file: a second connection holds the write lock (BEGIN
IMMEDIATE), the claim waits in SQLite's busy handler, the clock moves on, the lock is
released. The clock is the test's own, so the assertion is about order, not speed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.sqlite import SqliteStore, open_store
from fsm import Engine, FakeClock, Owner
from fsm.records import Job

OWNER = Owner("host", 1, "inc")


class CountedClock(FakeClock):
    """A fake clock that counts its reads (to know the claim has read it once)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def now(self) -> float:
        self.reads += 1
        return super().now()


@pytest.fixture
def store(sqlite_url: str) -> Iterator[SqliteStore]:
    s = open_store(sqlite_url)
    yield s
    s.close()


def _path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


@pytest.mark.parametrize("start", [False, True], ids=["claim", "claim-and-start"])
def test_a_claim_that_waited_for_the_write_lock_records_the_time_it_got_it(
    store: SqliteStore, sqlite_url: str, start: bool
) -> None:
    # given: a due job, and another connection holding the file's write lock
    clock = CountedClock()
    engine = Engine(store, clock=clock)
    job = engine.submit("k", None)
    blocker = sqlite3.connect(_path(sqlite_url), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    reads = clock.reads
    got: list[Job] = []

    def claim() -> None:
        got.extend(engine.claim(OWNER, limit=1, start=(lambda j: {}) if start else None))

    # when: a claim starts (reads the clock once) and waits for the lock; the clock moves
    # 2.5 s on; then the other writer lets go
    waiting = threading.Thread(target=claim)
    waiting.start()
    while clock.reads == reads and waiting.is_alive():
        threading.Event().wait(0.01)
    threading.Event().wait(0.2)  # well inside the 5 s busy timeout: the claim is waiting
    released_at = clock.advance(2.5)
    blocker.execute("COMMIT")
    blocker.close()
    waiting.join(30)

    # then: the lease (and start) carry a time no earlier than the release
    assert [j.id for j in got] == [job.id]
    entries = [e for e in engine.history(job.id) if e.event in ("lease", "start")]
    assert [e.event for e in entries] == (["lease", "start"] if start else ["lease"])
    assert all(e.at >= released_at for e in entries), [(e.event, e.at) for e in entries]
    assert got[0].lease_until == released_at + engine.policy.lease.ttl
