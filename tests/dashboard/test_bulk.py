"""Bulk operator actions (fsm.service.bulk) and a schedule's trigger-now on the real
stores: the selection's bound, one bad job failing alone, the audit of each job under
the operator, and a store error stopping the action where it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, FakeClock, Owner, open_store
from fsm.errors import BadInput, StoreError
from fsm.ports import JobBrowser, NotesScheduleChanges, ScheduleChange
from fsm.records import Job
from fsm.service import bulk
from fsm.service.schedules import Schedules, schedule

OWNER = Owner("host.example", 7, "0123456789abcdef")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        yield Engine(store, clock=FakeClock(1_700_000_000.0))
    finally:
        store.close()


def _browser(engine: Engine) -> JobBrowser:
    store = engine.store
    assert isinstance(store, JobBrowser)
    return store


def _failed(engine: Engine, n: int, queue: str = "q") -> list[str]:
    engine.submit_many([("k", {"i": i}, {"queue": queue}) for i in range(n)])
    ids: list[str] = []
    while jobs := engine.claim(OWNER, [queue], limit=200, start=lambda j: {}):
        engine.report_many(
            [(j, "fail", {"fence": j.fence, "error": "no", "permanent": True}) for j in jobs]
        )
        ids += [j.id for j in jobs]
    return ids


def test_a_selection_holds_at_most_max_bulk_jobs_newest_first_and_says_there_are_more(
    engine: Engine,
) -> None:
    engine.submit_many([("k", {"i": i}, {"queue": "big"}) for i in range(bulk.MAX_BULK + 1)])
    engine.submit("k", {}, queue="other")
    ids, more = bulk.select(_browser(engine), bulk.Selection(state="queued", queue="big"))
    assert len(ids) == bulk.MAX_BULK
    assert more
    assert ids == sorted(ids, reverse=True)
    small, more = bulk.select(_browser(engine), bulk.Selection(state="queued", queue="other"))
    assert (len(small), more) == (1, False)
    with pytest.raises(BadInput, match="1 to 1000"):
        bulk.select(_browser(engine), bulk.Selection(state="queued"), limit=bulk.MAX_BULK + 1)


def test_each_job_goes_through_the_engine_audited_and_a_bad_one_fails_alone(
    engine: Engine,
) -> None:
    failed = _failed(engine, 3)
    queued = engine.submit("k", {}, queue="q").id
    ids = [failed[0], queued, "0" * 26, failed[1], failed[2]]
    one = bulk.operation(engine, "requeue", actor="carol", reason="relay fixed", attempts=2)
    outcome = bulk.apply("requeue", ids, one, reason="relay fixed")
    assert outcome.done == (failed[0], failed[1], failed[2])
    assert outcome.failed == 2
    assert [job_id for job_id, _err in outcome.errors] == [queued, "0" * 26]
    assert outcome.stopped is None
    for job_id in failed:
        last = engine.history(job_id)[-1]
        assert (last.event, last.actor, last.reason, last.to_state) == (
            "requeue",
            "carol",
            "relay fixed",
            "queued",
        )
        assert engine.get(job_id).max_attempts >= 2
    # the job the action does not apply to is untouched, its trail too
    assert engine.get(queued).state == "queued"
    assert [e.event for e in engine.history(queued)] == ["submit"]


def test_bad_input_changes_nothing(engine: Engine) -> None:
    failed = _failed(engine, 2)
    one = bulk.operation(engine, "requeue", actor="carol", reason="x", attempts=1)
    with pytest.raises(BadInput, match="reason"):
        bulk.apply("requeue", failed, one, reason="")
    with pytest.raises(BadInput, match="unknown bulk action"):
        bulk.apply("erase", failed, one, reason="x")
    with pytest.raises(BadInput, match="at most 1000"):
        bulk.apply("requeue", ["x"] * (bulk.MAX_BULK + 1), one, reason="x")
    with pytest.raises(BadInput, match="unknown action"):
        bulk.operation(engine, "erase", actor="carol", reason="x")
    assert {engine.get(i).state for i in failed} == {"failed"}


def test_a_store_error_stops_the_action_where_it_was() -> None:
    called: list[str] = []

    def one(job_id: str) -> Job:
        called.append(job_id)
        if job_id == "b":
            raise StoreError("database is gone")
        raise BadInput("not this one")

    outcome = bulk.apply("cancel", ["a", "b", "c"], one, reason="x")
    assert called == ["a", "b"]
    assert outcome.failed == 1
    assert outcome.stopped is not None
    assert "job b" in outcome.stopped
    assert "database is gone" in outcome.stopped


def test_trigger_now_submits_the_schedules_job_as_the_tick_at_this_instant(
    engine: Engine,
) -> None:
    keeper = Schedules(engine)
    keeper.add(
        schedule("digest", "mail.send", every=3600, queue="mail", payload={"to": "all"}),
        actor="alice",
        reason="r",
    )
    keeper.pause("digest", actor="alice", reason="quiet week")
    job = keeper.trigger("digest", actor="carol", reason="wanted now")
    assert (job.kind, job.queue, job.state, job.payload) == (
        "mail.send",
        "mail",
        "queued",
        {"to": "all"},
    )
    assert job.idempotency_key == "schedule:digest:2023-11-14T22:13:20+00:00"
    # the same instant twice is the same tick: one job
    assert keeper.trigger("digest", actor="carol", reason="again").id == job.id
    with pytest.raises(BadInput, match="no schedule named"):
        keeper.trigger("nope", actor="carol", reason="x")
    with pytest.raises(BadInput, match="reason"):
        keeper.trigger("digest", actor="carol", reason="")
    assert sum(engine.counts().values()) == 1
    # each trigger is a schedule change under the operator's name, naming its job
    triggers = [c for c in keeper.changes("digest") if c.action == "triggered"]
    assert [(c.actor, c.reason, c.definition) for c in triggers] == [
        ("carol", "again", f'{{"job": "{job.id}"}}'),
        ("carol", "wanted now", f'{{"job": "{job.id}"}}'),
    ]
    # a change of no schedule is not noted
    store = engine.store
    assert isinstance(store, NotesScheduleChanges)
    assert not store.note_schedule_change(ScheduleChange("nope", "triggered", "c", "r", 1.0))
    assert keeper.changes("nope") == []
