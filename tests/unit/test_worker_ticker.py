"""The worker's scheduler thread on a fake clock (memory store): it stores the schedules
declared in code (audited) and submits their ticks; `scheduler=False` submits none but
tells the store its kinds; a stopping worker gives up its lead."""

from __future__ import annotations

import threading
import time

import pytest

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.clock import FakeClock
from fsm.errors import BadInput
from fsm.ports import ScanRequest
from fsm.service.schedules import Schedules, tick_key
from fsm.worker import Context, Handlers, Worker
from fsm.worker.ticker import MAX_SCHEDULE_INTERVAL

ALL = ("queued", "leased", "running", "succeeded", "failed", "retry_wait")


def _handlers() -> Handlers:
    handlers = Handlers()

    @handlers.periodic(every=10.0, payload={"n": 1})
    @handlers.handler("beat")
    def beat(ctx: Context) -> None:
        return None

    return handlers


def _keys(engine: Engine) -> list[str]:
    jobs = engine.scan(ScanRequest(states=ALL, limit=1000))
    return sorted(j.idempotency_key or "" for j in jobs)


def _run(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert worker.wait_started(10)
    return thread


def test_the_scheduler_stores_code_schedules_and_submits_each_tick_on_a_fake_clock() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    engine = Engine(MemoryStore(), clock=clock)
    worker = Worker(engine, _handlers(), install_signals=False, schedule_interval=0.01)
    thread = _run(worker)
    try:
        until = time.monotonic() + 10
        while not Schedules(engine).list() and time.monotonic() < until:
            time.sleep(0.01)
        clock.advance(35.0)  # ticks at +10, +20, +30
        expected = [tick_key("beat", 1_700_000_000.0 + d) for d in (10.0, 20.0, 30.0)]
        while _keys(engine) != expected and time.monotonic() < until:
            time.sleep(0.01)
        assert _keys(engine) == expected
        (view,) = Schedules(engine).list()
        assert view.record.origin == "code"
        assert view.record.last_tick == 1_700_000_030.0
        assert view.next_tick == 1_700_000_040.0
        assert view.handled is True
        (declared,) = Schedules(engine).changes("beat")
        assert (declared.action, declared.actor) == ("added", f"code:{worker.identity.owner}")
    finally:
        worker.stop()
        thread.join(timeout=10)


def test_a_worker_without_its_scheduler_submits_nothing_but_tells_its_kinds() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    store = MemoryStore()
    engine = Engine(store, clock=clock)
    worker = Worker(engine, _handlers(), install_signals=False, scheduler=False)
    thread = _run(worker)
    try:
        clock.advance(35.0)
        until = time.monotonic() + 10
        while not store.schedulers() and time.monotonic() < until:
            time.sleep(0.01)
        assert Schedules(engine).list() == []
        assert _keys(engine) == []
        (beat,) = store.schedulers()
        assert (beat.kinds, beat.lead_until) == (("beat",), None)
    finally:
        worker.stop()
        thread.join(timeout=10)


def test_a_stopping_worker_gives_up_its_lead() -> None:
    store = MemoryStore()
    engine = Engine(store, clock=FakeClock(start=1_700_000_000.0))
    worker = Worker(engine, _handlers(), install_signals=False, schedule_interval=0.01)
    thread = _run(worker)
    until = time.monotonic() + 10
    while not any(b.lead_until for b in store.schedulers()) and time.monotonic() < until:
        time.sleep(0.01)
    assert any(b.lead_until for b in store.schedulers())
    worker.stop()
    thread.join(timeout=10)
    assert [b.lead_until for b in store.schedulers()] == [None]


@pytest.mark.parametrize("interval", [0.0, -1.0, MAX_SCHEDULE_INTERVAL + 0.5])
def test_a_schedule_interval_outside_its_bounds_is_refused(interval: float) -> None:
    with pytest.raises(ValueError, match="schedule_interval must be"):
        Worker(
            Engine(MemoryStore()), _handlers(), install_signals=False, schedule_interval=interval
        )


def test_periodic_needs_a_kind_and_refuses_a_bad_schedule_before_anything_runs() -> None:
    handlers = Handlers()

    def orphan(ctx: Context) -> None:
        return None

    with pytest.raises(BadInput, match="give kind="):
        handlers.periodic("* * * * *")(orphan)
    with pytest.raises(BadInput, match="bad cron expression"):
        handlers.periodic("99 * * * *", kind="x")(orphan)
    handlers.periodic(every=5, kind="x", name="five")(orphan)
    with pytest.raises(BadInput, match="declared twice"):
        handlers.periodic(every=6, kind="x", name="five")(orphan)
    assert list(handlers.schedules) == ["five"]
