"""A recovered job is leased ahead of newer work of the same priority, on every store.

A run lost to a crash goes back to the queue in the place it had (its `run_after`
is kept, see `fsm.lifecycle.rules._retry_now`), so a worker's next claim batch
takes it before the backlog submitted while it ran, instead of after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm import Engine, Owner, open_store
from fsm.clock import FakeClock

BACKLOG = 2_500  # the backlog that kept a recovered job waiting about a minute
CLAIM_BATCH = 32  # the worker's default thread slots: its largest claim batch
OWNER = Owner("host-a", 1, "inc-a")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "memory":
        url = "memory://"
    else:
        url = request.getfixturevalue(f"{'pg' if request.param == 'postgres' else 'sqlite'}_url")
    engine = Engine(open_store(url), clock=FakeClock())
    try:
        yield engine
    finally:
        engine.store.close()


def test_a_recovered_job_is_leased_in_the_next_claim_batch_under_a_backlog(
    engine: Engine,
) -> None:
    clock = engine.clock
    assert isinstance(clock, FakeClock)
    # given a job that was running when its owner died
    lost = engine.submit("k", {"n": 0}, retry_safe=True)
    clock.advance(1.0)
    (leased,) = engine.claim(OWNER, limit=1)
    engine.start(leased.id, leased.fence)
    # and a backlog of the same priority submitted while it ran
    clock.advance(1.0)
    engine.submit_many([("k", {"n": i}, {}) for i in range(1, BACKLOG + 1)])
    clock.advance(1.0)
    # when the owner's death is confirmed and the job recovered
    recovered = engine.expire(lost.id, verdict="dead", reason="pid gone")
    assert recovered.state == "retry_wait"
    # then it is due at once, and the very next claim batch takes it first
    assert recovered.run_after <= clock.now()
    batch = engine.claim(Owner("host-a", 2, "inc-b"), limit=CLAIM_BATCH)
    assert len(batch) == CLAIM_BATCH
    assert batch[0].id == lost.id
    assert batch[0].recoveries == 1
