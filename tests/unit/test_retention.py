"""Automatic retention (docs/retention.md): its settings refuse bad input by name, a
pass holds the store's service lease, prunes within its bound and gives the lease up;
the worker runs it only when asked. The fault model `retention` checks the promises
under several workers; tests/integration/retention runs real worker processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from adapters.memory import MemoryStore
from fsm import BadInput, Engine, FakeClock, Worker
from fsm.cli import cli
from fsm.ports import ScanRequest
from fsm.records import Owner
from fsm.service.maintenance.retention import (
    LEASE_NAME,
    Retention,
    RetentionPlan,
    duration,
    parse_retain,
)

DAY = 86400.0
OWNER = Owner(host="unit", pid=1, incarnation="unit-retention")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("7d", 7 * DAY), ("12h", 43200.0), ("30m", 1800.0), ("45s", 45.0), ("1.5d", 1.5 * DAY)],
)
def test_a_duration_has_a_unit(text: str, expected: float) -> None:
    assert duration("--retain succeeded", text) == expected


def test_forever_keeps_the_state() -> None:
    assert parse_retain("failed=forever") == ("failed", None)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("succeeded", "expected STATE=DURATION"),
        ("succeeded=7", "'7' is not a duration"),
        ("succeeded=-1d", "'-1d' is not a duration"),
        ("succeeded=0s", "must be positive"),
        ("succeeded=7 days", "is not a duration"),
        ("investigate=7d", "state 'investigate'"),
        ("running=7d", "state 'running'"),
        ("nosuch=7d", "state 'nosuch'"),
    ],
)
def test_a_bad_retain_is_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(BadInput, match=named):
        parse_retain(text)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"keep": {}}, "retention must map finished states"),
        ({"keep": {"succeeded": float("inf")}}, "retention of succeeded"),
        ({"keep": {"succeeded": 0}}, "retention of succeeded must be positive"),
        ({"keep": {"queued": 60.0}}, "state 'queued'"),
        ({"keep": {"succeeded": 60.0}, "every": 0.5}, "every must be at least 1"),
        ({"keep": {"succeeded": 60.0}, "every": float("nan")}, "retention every"),
        ({"keep": {"succeeded": 60.0}, "batch": 0}, "retention batch"),
        ({"keep": {"succeeded": 60.0}, "batch": 10_001}, "retention batch"),
        ({"keep": {"succeeded": 60.0}, "max_batches": 1001}, "retention max_batches"),
        ({"keep": {"succeeded": 60.0}, "lease_for": -1.0}, "retention lease_for"),
    ],
)
def test_a_bad_plan_is_refused_by_name(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(BadInput, match=named):
        RetentionPlan(**kwargs)  # type: ignore[arg-type]


def _finished(engine: Engine, n: int, state: str = "succeeded") -> list[str]:
    ids = []
    for _ in range(n):
        job = engine.submit("k", {})
        if state == "cancelled":
            engine.cancel(job.id, actor="t", reason="t")
        else:
            (leased,) = engine.claim(OWNER, ("default",), 1, ids=[job.id])
            engine.start(job.id, leased.fence)
            engine.succeed(job.id, leased.fence)
        ids.append(job.id)
    return ids


def test_a_pass_holds_the_lease_prunes_within_its_bound_and_gives_the_lease_up() -> None:
    # given 25 jobs finished 2 days ago and a second worker's retention on the same store
    clock = FakeClock(1_000_000.0)
    store = MemoryStore()
    engine = Engine(store, clock=clock)
    old = _finished(engine, 25)
    clock.advance(2 * DAY)
    young = _finished(engine, 3)
    plan = RetentionPlan(keep={"succeeded": DAY}, batch=4, max_batches=3)
    first = Retention(engine, plan, owner="first")
    second = Retention(engine, plan, owner="second")
    # when the first passes: it holds the lease and deletes 3 batches of 4, no more
    report = first.run_once()
    assert first.holding
    assert report.pruned == 12
    assert first.batches == 3
    assert report.behind == 1
    (lease,) = store.service_leases()
    assert (lease.name, lease.owner, lease.until) == (
        LEASE_NAME,
        "first",
        clock.now() + 3 * plan.every,
    )
    # the second is refused while the first holds it
    assert second.run_once().pruned == 0
    assert not second.holding
    # when the first gives it up, the second takes it and prunes the rest
    first.stop()
    assert second.run_once().pruned == 12
    assert second.holding
    assert second.run_once().pruned == 1  # the next pass goes on
    left = {j.id for j in engine.scan(ScanRequest(states=("succeeded",), limit=100))}
    assert left == set(young)
    assert not set(old) & left


def test_the_lease_passes_to_another_worker_once_it_expires() -> None:
    clock = FakeClock(1_000_000.0)
    engine = Engine(MemoryStore(), clock=clock)
    plan = RetentionPlan(keep={"succeeded": DAY}, lease_for=30.0)
    dead, alive = Retention(engine, plan, "dead"), Retention(engine, plan, "alive")
    dead.run_once()  # then it is killed: it never gives the lease up
    clock.advance(29.0)
    assert not (alive.run_once(), alive.holding)[1]
    clock.advance(1.0)
    alive.run_once()
    assert alive.holding


def test_states_not_named_follow_the_engines_retention() -> None:
    # given cancelled jobs 8 days old (default retention 7 days) and succeeded ones
    clock = FakeClock(1_000_000.0)
    engine = Engine(MemoryStore(), clock=clock)
    cancelled = _finished(engine, 2, "cancelled")
    succeeded = _finished(engine, 2)
    clock.advance(8 * DAY)
    # when a plan names only succeeded, kept 30 days
    Retention(engine, RetentionPlan(keep={"succeeded": "30d"}), "w").run_once()
    # then the cancelled ones go by the default, the succeeded ones stay
    assert all(engine.store.get(i) is None for i in cancelled)
    assert all(engine.store.get(i) is not None for i in succeeded)


def test_a_worker_prunes_only_when_given_a_retention(tmp_path: Path) -> None:
    # given jobs finished 10 days ago
    clock = FakeClock(1_000_000.0)
    store = MemoryStore()
    old = _finished(Engine(store, clock=clock), 3)
    clock.advance(10 * DAY)
    for retention, gone in ((None, False), ({"succeeded": "1d"}, True)):
        engine = Engine(store, clock=clock)
        # when a worker runs (without, then with a retention)
        worker = Worker(engine, {"k": lambda ctx: None}, retention=retention)
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        assert worker.wait_started(10)
        if gone:
            assert worker.retention is not None
            for _ in range(200):
                if all(store.get(i) is None for i in old):
                    break
                threading.Event().wait(0.02)
        worker.stop()
        runner.join(30)
        # then only the worker with a retention pruned, and it gave its lease up on stop
        assert all((store.get(i) is None) == gone for i in old), retention
        assert store.service_leases() == []


def test_the_worker_command_refuses_a_bad_retain_by_name() -> None:
    result = CliRunner().invoke(
        cli, ["worker", "--app", "nosuch", "--store", "sqlite:///x.db", "--retain", "queued=1d"]
    )
    assert result.exit_code != 0
    assert "state 'queued'" in result.output
