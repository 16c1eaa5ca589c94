"""Schedules under real `jobfsm worker` processes (SQLite and PostgreSQL): four schedulers
give exactly one job per tick, and SIGKILLed schedulers lose and double no tick."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.ports import ScanRequest
from fsm.schedules import Schedule, schedule, tick_key, ticks_after
from fsm.scheduling import Schedules

REPO = Path(__file__).resolve().parents[3]
TICKS = 1000
EVERY = 0.01  # 1,000 ticks in 10 s


class Pool:
    """`jobfsm worker` processes with their scheduler on; whatever is left is killed."""

    def __init__(self, tmp: Path, url: str, app: str) -> None:
        self.tmp, self.url, self.app = tmp, url, app
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        log = self.tmp / f"worker-{len(self.procs)}.log"
        cmd = [
            *(sys.executable, "-m", "fsm.cli", "worker", "--app", self.app),
            *("--store", self.url, "--schedule-interval", "0.05", "--poll-interval", "0.5"),
            *("--log-level", "WARNING"),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("*.log")))


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    engine = Engine(open_store(url))
    yield engine
    engine.store.close()


def _keys(engine: Engine, queue: str) -> list[str]:
    jobs = engine.scan(ScanRequest(states=("queued",), queues=(queue,), limit=100_000))
    return [j.idempotency_key or "" for j in jobs]


def _run_until_ticks(engine: Engine, s: Schedule, created: float, pool: Pool, chaos: bool) -> None:
    """Wait (at most 120 s) until the schedule's last tick covers TICKS ticks; with
    `chaos`, SIGKILL a random scheduling worker every 0.4-0.9 s and start another."""
    service = Schedules(engine)
    until = time.monotonic() + 120
    kills = 0
    next_kill = time.monotonic() + 2.0
    while time.monotonic() < until:
        (view,) = service.list()
        last = view.record.last_tick
        if last is not None and len(ticks_after(s, created, last, TICKS + 1)) >= TICKS:
            break
        if chaos and time.monotonic() >= next_kill and pool.alive():
            victim = random.choice(pool.alive())
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            kills += 1
            pool.start()
            next_kill = time.monotonic() + random.uniform(0.4, 0.9)
        time.sleep(0.05)
    else:
        raise AssertionError(f"the schedulers did not reach {TICKS} ticks in 120 s:\n{pool.logs()}")
    service.pause("fast")  # no new ticks; a pass already under way may still finish
    if chaos:
        assert kills >= 5, f"only {kills} SIGKILLs happened"


def _check_exactly_once(engine: Engine, s: Schedule, created: float) -> int:
    """Every tick from the first to the newest submitted has exactly one job (a pass
    stopped between its submit and its compare-and-set leaves jobs past the stored last
    tick: submitted once, and found again, not doubled, when the schedule resumes)."""
    (view,) = Schedules(engine).list()
    last = view.record.last_tick
    assert last is not None
    keys = _keys(engine, "ticks")
    assert len(keys) == len(set(keys)), "a tick was submitted twice"
    newest = max(datetime.fromisoformat(k.split(":", 2)[2]).timestamp() for k in keys)
    assert newest >= last
    ticks = ticks_after(s, created, newest, 100_000)
    assert sorted(keys) == sorted(tick_key("fast", t) for t in ticks), "a tick was lost"
    first = ticks[:TICKS]
    assert len(first) == TICKS
    assert len(set(keys) & {tick_key("fast", t) for t in first}) == TICKS
    return len(ticks)


@pytest.mark.slow
def test_four_scheduling_workers_give_exactly_one_job_per_tick(
    engine: Engine, url: str, tmp_path: Path
) -> None:
    # given a schedule every 10 ms and four worker processes running the scheduler
    s = schedule("fast", "tick", every=EVERY, queue="ticks", missed="catch_up", catch_up=1000)
    Schedules(engine).add(s)
    (view,) = Schedules(engine).list()
    created = view.record.created_at
    pool = Pool(tmp_path, url, "tests.integration.schedules.app:handlers")
    try:
        for _ in range(4):
            pool.start()
        # when they run for 1,000 ticks
        _run_until_ticks(engine, s, created, pool, chaos=False)
    finally:
        pool.stop()
    # then every tick up to the last one has exactly one job
    total = _check_exactly_once(engine, s, created)
    assert total >= TICKS


@pytest.mark.slow
def test_sigkilled_schedulers_lose_and_double_no_tick(
    engine: Engine, url: str, tmp_path: Path
) -> None:
    # given four scheduling workers, one SIGKILLed (and replaced) about twice a second
    s = schedule("fast", "tick", every=EVERY, queue="ticks", missed="catch_up", catch_up=1000)
    Schedules(engine).add(s)
    (view,) = Schedules(engine).list()
    created = view.record.created_at
    pool = Pool(tmp_path, url, "tests.integration.schedules.app:handlers")
    try:
        for _ in range(4):
            pool.start()
        _run_until_ticks(engine, s, created, pool, chaos=True)
    finally:
        pool.stop()
    # then still every tick has exactly one job
    assert _check_exactly_once(engine, s, created) >= TICKS


def test_a_schedule_declared_in_code_is_stored_and_ticked_by_a_worker(
    engine: Engine, url: str, tmp_path: Path
) -> None:
    pool = Pool(tmp_path, url, "tests.integration.schedules.app:declared")
    try:
        pool.start()
        until = time.monotonic() + 60
        while time.monotonic() < until and len(_succeeded_beats(engine)) < 3:
            time.sleep(0.1)
    finally:
        pool.stop()
    (view,) = Schedules(engine).list()
    assert (view.record.name, view.record.origin) == ("beat", "code")
    assert view.schedule is not None
    assert view.schedule.every == 0.2
    beats = _succeeded_beats(engine)
    assert len(beats) >= 3, pool.logs()
    assert all(k.startswith("schedule:beat:") for k in beats)


def _succeeded_beats(engine: Engine) -> list[str]:
    jobs = engine.scan(ScanRequest(states=("succeeded",), queues=("beats",), limit=10_000))
    return [j.idempotency_key or "" for j in jobs]
