"""Unique submits from 16 real processes racing on the same keys, on a real SQLite file
and a real PostgreSQL database: exactly one live job per key, and every submitter gets
that job back (docs/uniqueness.md). Some submitters are killed with SIGKILL mid-race:
their open transactions roll back and take no key with them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.lifecycle.unique import live_states
from fsm.ports import ScanRequest
from fsm.records import Job

PROCESSES = 16
KEYS = 64
ROUNDS = 2

SUBMITTER = """
import json, os, sys, time
from fsm import Engine, open_store
url, n, rounds, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
engine = Engine(open_store(url))
engine.store.get("warm-up")  # connected before the start
print("ready", flush=True)
while sys.stdin.readline() == "go\\n":  # a start: every submitter is ready
    seen = []
    for r in range(rounds):
        order = [f"key-{(k * (1 + 2 * n) + n) % keys}" for k in range(keys)]
        if n % 2:  # half the submitters send their keys as one batch
            jobs = engine.submit_many([("race", {"n": n, "r": r}, {"unique": k}) for k in order])
        else:
            jobs = [engine.submit("race", {"n": n, "r": r}, unique=k) for k in order]
        seen += [[j.unique_key, j.id] for j in jobs]
    print(json.dumps(seen), flush=True)
engine.store.close()
"""


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'race.db'}"
    return f"{request.getfixturevalue('pg_url')}?pool_max=2"


def _submitters(url: str, numbers: range) -> list[subprocess.Popen[str]]:
    """Submitter processes, each connected and ready for a start."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SUBMITTER, url, str(n), str(ROUNDS), str(KEYS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in numbers
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    return children


def _race(children: list[subprocess.Popen[str]], killed: set[int]) -> list[tuple[str, str]]:
    """Start every submitter at once (each is connected and waiting); SIGKILL those in
    `killed` just after the start. Returns (key, job id) of every submit the survivors
    saw; the survivors wait for the next start."""
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    time.sleep(0.05)
    for n in killed:
        children[n].send_signal(signal.SIGKILL)
    seen: list[tuple[str, str]] = []
    for n, child in enumerate(children):
        if n in killed:  # killed mid-race (or waiting, its race done): its answers go unread
            child.communicate(timeout=300)
            continue
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            _out, err = child.communicate(timeout=300)
            pytest.fail(f"submitter {n} exited {child.returncode}: {err[-2000:]}")
        seen += [(key, job_id) for key, job_id in json.loads(line)]
    return seen


def _end(children: list[subprocess.Popen[str]]) -> None:
    """Let the waiting submitters exit (no further start); each must exit cleanly."""
    for child in children:
        _out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]


def _live_by_key(engine: Engine) -> dict[str, list[Job]]:
    live = set(live_states(engine.kernel.spec))
    out: dict[str, list[Job]] = {}
    for job in _all_jobs(engine):
        if job.state in live and job.unique_key is not None:
            out.setdefault(job.unique_key, []).append(job)
    return out


def _all_jobs(engine: Engine) -> list[Job]:
    states = tuple(engine.kernel.spec.states)
    return engine.store.scan(ScanRequest(states=states, limit=100_000))


@pytest.mark.slow
def test_racing_processes_leave_exactly_one_live_job_per_key(url: str) -> None:
    # given a store, and no job yet
    store = open_store(url)
    engine = Engine(store)
    killed = {3, 8, 13}
    racers: list[subprocess.Popen[str]] = []
    try:
        # when 16 processes submit the same 64 keys at once, twice each, 3 of them killed
        racers = _submitters(url, range(PROCESSES))
        seen = _race(racers, killed)

        # then each key has exactly one job, and every submitter got that job back
        live = _live_by_key(engine)
        assert set(live) == {f"key-{k}" for k in range(KEYS)}
        assert all(len(jobs) == 1 for jobs in live.values()), live
        assert {job_id for _, job_id in seen} == {jobs[0].id for jobs in live.values()}
        assert {(k, i) for k, i in seen} == {(k, jobs[0].id) for k, jobs in live.items()}
        first = {jobs[0].id for jobs in live.values()}

        # when every job finishes and the processes race again
        for jobs in live.values():
            engine.cancel(jobs[0].id, actor="test", reason="the next round")
        # (the 13 survivors, connected since the first race, and 3 new processes in place
        # of the killed ones: 16 again without starting 13 interpreters twice, #38)
        survivors = [c for n, c in enumerate(racers) if n not in killed]
        racers = survivors + _submitters(url, range(PROCESSES, PROCESSES + len(killed)))
        seen = _race(racers, killed=set())
        _end(racers)

        # then each key has exactly one new live job, and the finished ones stay
        live = _live_by_key(engine)
        assert all(len(jobs) == 1 for jobs in live.values()), live
        assert len(live) == KEYS
        assert not first & {jobs[0].id for jobs in live.values()}
        assert {(k, i) for k, i in seen} == {(k, jobs[0].id) for k, jobs in live.items()}
        assert len(_all_jobs(engine)) == 2 * KEYS
    finally:
        for child in racers:  # a failed check leaves no submitter behind
            if child.poll() is None:
                child.kill()
                child.communicate(timeout=60)
        store.close()
