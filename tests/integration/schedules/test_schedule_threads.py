"""A cron schedule with seconds, in a timezone, on a clock running 100 times faster:
four in-process workers (threads, each with its own store handle) give exactly one job
per tick for 1,000 ticks, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.clock import ScaledClock
from fsm.ports import ScanRequest
from fsm.service.schedules import Schedules, schedule, tick_key, ticks_after
from fsm.worker import Context, Handlers, Worker

TICKS = 1000
FACTOR = 100.0  # one tick a second of schedule time: 1,000 ticks in 10 s


def _noop(ctx: Context) -> None:
    return None


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.slow
def test_four_workers_on_an_accelerated_clock_give_one_job_per_cron_tick(url: str) -> None:
    # given a cron schedule firing every second, Berlin time, and a clock 100x faster
    clock = ScaledClock(FACTOR)
    admin = Engine(open_store(url), clock=clock)
    s = schedule(
        "every-second",
        "tick",
        cron="* * * * * *",
        timezone="Europe/Berlin",
        queue="ticks",
        missed="catch_up",
        catch_up=1000,
    )
    Schedules(admin).add(s, actor="test", reason="integration test")
    created = Schedules(admin).list()[0].record.created_at
    workers = []
    threads = []
    for _ in range(4):
        engine = Engine(open_store(url), clock=clock)
        w = Worker(
            engine,
            Handlers({"noop": _noop}),
            install_signals=False,
            schedule_interval=0.02,
            poll_interval=0.5,
        )
        workers.append(w)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        threads.append(t)
    try:
        # when they run until 1,000 ticks are recorded (at most 120 s)
        until = time.monotonic() + 120
        while time.monotonic() < until:
            last = Schedules(admin).list()[0].record.last_tick
            if last is not None and len(ticks_after(s, created, last, TICKS + 1)) >= TICKS:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("1,000 ticks were not reached in 120 s")
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(timeout=30)
        for w in workers:
            w.engine.store.close()
    # then every tick from the first to the newest submitted has exactly one job
    jobs = admin.scan(ScanRequest(states=("queued",), queues=("ticks",), limit=100_000))
    keys = [j.idempotency_key or "" for j in jobs]
    admin.store.close()
    assert len(keys) == len(set(keys))
    last = max(ticks_after(s, created, clock.now(), 100_000), key=lambda t: t)
    expected = [tick_key(s.name, t) for t in ticks_after(s, created, last, 100_000)]
    assert set(keys) <= set(expected)
    newest = max(expected.index(k) for k in keys)
    assert sorted(keys) == sorted(expected[: newest + 1]), "a tick was lost"
    assert len(keys) >= TICKS
