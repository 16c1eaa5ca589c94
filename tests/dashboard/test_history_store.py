"""The `History` port (issue 35 item 3) on the memory store, a real SQLite file and a
fresh PostgreSQL database: grouped counts of the audit trail per bucket, queue, kind
and edge, and the queue latency of first leases, equal to what the trails hold."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from fsm import Engine, Owner, open_store
from fsm.clock import FakeClock
from fsm.errors import BadInput
from fsm.ports import History, HistoryRequest
from fsm.ports.history import MAX_BUCKETS, MAX_SPAN

T0 = 1_800_000_000.0
OWNER = Owner("hist.example", 7, "a1a2a3a4a5a6a7a8")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    else:
        request.applymarker(pytest.mark.services)
        url = request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        yield Engine(store, clock=FakeClock(T0))
    finally:
        store.close()


def _run(engine: Engine, queue: str, kind: str, wait: float, outcome: str) -> str:
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    job = engine.submit(kind, {}, queue=queue)
    clock.advance(wait)
    (leased,) = engine.claim(OWNER, [queue], limit=1, ids=[job.id])
    engine.start(job.id, leased.fence)
    clock.advance(1)
    if outcome == "succeeded":
        engine.succeed(job.id, leased.fence)
    elif outcome == "retry":
        engine.fail(job.id, leased.fence, "try later", delay=5)
    else:
        engine.fail(job.id, leased.fence, "broken", permanent=True)
    return job.id


def _fill(engine: Engine) -> list[str]:
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    ids = [
        _run(engine, "mail", "mail.send", 30, "succeeded"),
        _run(engine, "mail", "mail.send", 10, "failed"),
    ]
    clock.advance(600)  # the next bucket
    ids.append(_run(engine, "mail", "mail.send", 50, "succeeded"))
    ids.append(_run(engine, "reports", "report.build", 2, "retry"))
    return ids


def test_the_grouped_counts_equal_the_audit_trails(engine: Engine) -> None:
    store = engine.store
    assert isinstance(store, History)
    ids = _fill(engine)
    request = HistoryRequest(since=T0, until=engine.clock.now() + 1, bucket=300)
    got = store.history_counts(request)
    assert not got.truncated
    expected: Counter[tuple[int, str, str, str, str]] = Counter()
    for job_id in ids:
        job = engine.get(job_id)
        for e in engine.history(job_id):
            if e.outcome == "applied":
                key = (request.bucket_of(e.at), job.queue, job.kind, e.event, e.to_state)
                expected[key] += 1
    assert {(r.bucket, r.queue, r.kind, r.event, r.to_state): r.count for r in got.events} == (
        dict(expected)
    )
    # the queue latency of first leases: 30 s and 10 s in bucket 0, 50 s and 2 s in bucket 2
    latency = {(r.bucket, r.queue, r.kind): (r.count, r.total, r.longest) for r in got.latency}
    assert latency == {
        (0, "mail", "mail.send"): (2, pytest.approx(40.0), pytest.approx(30.0)),
        (2, "mail", "mail.send"): (1, pytest.approx(50.0), pytest.approx(50.0)),
        (2, "reports", "report.build"): (1, pytest.approx(2.0), pytest.approx(2.0)),
    }


def test_entries_outside_the_window_are_not_counted(engine: Engine) -> None:
    store = engine.store
    assert isinstance(store, History)
    _fill(engine)
    # only the second burst (from T0 + 600 on)
    got = store.history_counts(HistoryRequest(since=T0 + 600, until=T0 + 10_000, bucket=600))
    submits = sum(r.count for r in got.events if r.event == "submit")
    assert submits == 2
    assert {r.bucket for r in got.events} == {0}
    assert sum(r.count for r in got.latency) == 2
    empty = store.history_counts(HistoryRequest(since=T0 - 5000, until=T0 - 1, bucket=600))
    assert empty.events == ()
    assert empty.latency == ()


def test_an_unbounded_request_is_refused_by_name() -> None:
    with pytest.raises(BadInput, match="at most"):
        HistoryRequest(since=0, until=MAX_SPAN + 1, bucket=3600)
    with pytest.raises(BadInput, match="buckets"):
        HistoryRequest(since=0, until=3600, bucket=3600 / (MAX_BUCKETS + 1))
    with pytest.raises(BadInput, match="end after"):
        HistoryRequest(since=10, until=10, bucket=1)
