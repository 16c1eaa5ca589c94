"""`Engine.report_many` on real stores: reports on records a heartbeat moved are
decided again on the stored records and written together, not one transaction each;
a report that is really stale is still refused alone and recorded."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from fsm import Engine, KindPolicy, LeaseLost, open_store
from fsm.errors import TransientStoreError
from fsm.records import Decision, Job
from fsm.service.identity import Identity


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    engine = Engine(open_store(url), kinds={"k": KindPolicy()})
    try:
        yield engine
    finally:
        engine.store.close()


class Applies:
    """The real store's `apply`, its calls counted (one transaction each) and, with
    `fail_at`, that call (1-based) refused with a retryable store error before it
    reaches the store, as a dropped connection would be."""

    def __init__(self, engine: Engine, fail_at: int | None = None) -> None:
        self.batches: list[int] = []
        real = engine.store.apply

        def apply(decisions: Sequence[Decision]) -> Any:
            self.batches.append(len(decisions))
            if len(self.batches) == fail_at:
                raise TransientStoreError("injected: the connection dropped")
            return real(decisions)

        engine.store.apply = apply  # type: ignore[method-assign]


def _running(engine: Engine, n: int) -> list[Job]:
    engine.submit_many([("k", i, {}) for i in range(n)])
    owner = Identity().owner
    jobs = engine.claim(owner, ["default"], limit=n, start=lambda _job: {})
    assert [j.state for j in jobs] == ["running"] * n
    return jobs


def _renew(engine: Engine, jobs: Sequence[Job]) -> None:
    """A heartbeat of the jobs' owner: each renewed lease gets a new version."""
    owner = jobs[0].owner
    assert owner is not None
    assert set(engine.heartbeat(owner, {j.id: j.fence for j in jobs})) == {j.id for j in jobs}


def _succeed(jobs: Sequence[Job]) -> list[tuple[Job, str, dict[str, Any]]]:
    return [(j, "succeed", {"fence": j.fence, "result_json": '"ok"'}) for j in jobs]


def test_reports_on_records_a_heartbeat_moved_are_written_in_one_more_batch(
    engine: Engine,
) -> None:
    jobs = _running(engine, 6)
    fresh, moved = jobs[:2], jobs[2:]
    _renew(engine, moved)
    writes = Applies(engine)
    results = engine.report_many(_succeed(jobs))
    assert [r.state for r in results if isinstance(r, Job)] == ["succeeded"] * 6
    assert [r.id for r in results if isinstance(r, Job)] == [j.id for j in jobs]
    # the first batch writes the two current records; the four a heartbeat moved are
    # decided again on their stored records and written together
    assert writes.batches == [6, 4]
    for j in jobs:
        stored = engine.get(j.id)
        assert stored.state == "succeeded"
        assert stored.result == "ok"
        events = [e.event for e in engine.history(j.id)]
        assert events == ["submit", "lease", "start", "succeed"]
    assert engine.get(fresh[0].id).version < engine.get(moved[0].id).version


def test_a_report_with_a_fence_that_is_not_the_jobs_is_refused_alone_and_recorded(
    engine: Engine,
) -> None:
    jobs = _running(engine, 3)
    _renew(engine, jobs)
    reports = _succeed(jobs)
    stale = jobs[2].fence + 1  # as a worker holding an older or newer lease would say
    reports[2] = (jobs[2], "succeed", {"fence": stale, "result_json": '"late"'})
    writes = Applies(engine)
    results = engine.report_many(reports)
    assert [type(r) for r in results] == [Job, Job, LeaseLost]
    assert [engine.get(j.id).state for j in jobs] == ["succeeded", "succeeded", "running"]
    assert writes.batches == [2, 2]  # the stale one is in neither batch
    last = engine.history(jobs[2].id)[-1]
    assert (last.event, last.outcome, last.fence) == ("succeed", "rejected", stale)


def test_a_store_error_on_the_moved_reports_leaves_them_one_by_one_when_some_are_written(
    engine: Engine,
) -> None:
    jobs = _running(engine, 3)
    _renew(engine, jobs[1:])
    Applies(engine, fail_at=2)  # the first batch is written, the second fails
    results = engine.report_many(_succeed(jobs))
    # the written report is not retried (it would be refused as final); the two
    # moved ones are written alone, each after a fresh read
    assert [r.state for r in results if isinstance(r, Job)] == ["succeeded"] * 3
    assert [[e.event for e in engine.history(j.id)][-1] for j in jobs] == ["succeed"] * 3


def test_a_store_error_before_anything_is_written_is_the_callers_to_retry(
    engine: Engine,
) -> None:
    jobs = _running(engine, 3)
    _renew(engine, jobs)
    Applies(engine, fail_at=2)  # every record moved: the first batch writes nothing
    with pytest.raises(TransientStoreError):
        engine.report_many(_succeed(jobs))
    assert [engine.get(j.id).state for j in jobs] == ["running"] * 3
    results = engine.report_many(_succeed(jobs))  # the worker's bounded retry
    assert [r.state for r in results if isinstance(r, Job)] == ["succeeded"] * 3
