"""Automatic retention under real `jobfsm worker` processes, on a SQLite file and on
PostgreSQL (a database of the test's own): three workers with `--retain`, the lease
holder killed with SIGKILL halfway, then the next one stopped with SIGTERM.

- every finished job past its retention is pruned, and nothing else: young finished
  jobs, jobs of a state kept longer, and unfinished jobs stay;
- one worker prunes at a time: the pass lines of all workers, in time order, change
  hands only when a holder was killed (its lease expired) or stopped (it gave it up);
- every pass stays within its bound (`--retain-batch` x `--retain-max-batches`).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.clock import FakeClock
from fsm.ports import LeasesServices, ScanRequest
from fsm.records import Owner

REPO = Path(__file__).resolve().parents[3]
DAY = 86400.0
BATCH, MAX_BATCHES = 20, 2
OLD = 300  # succeeded 10 days ago: pruned (--retain succeeded=1d)
FINISHED = ("succeeded", "failed", "cancelled")
OWNER = Owner(host="retention-test", pid=1, incarnation="retention-test-a")
PASS = re.compile(
    r"^(\S+ \S+) (\d+) INFO fsm\.service\.maintenance\.retention: retention pass by .*?: "
    r"pruned (\d+) job\(s\) in (\d+) batch"
)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


def _seed(url: str) -> dict[str, set[str]]:
    """Jobs finished 10 days, 1.5 days and 1 hour ago, and unfinished ones: ids by group."""
    now = time.time()
    groups: dict[str, set[str]] = {}
    store = open_store(url)
    try:
        for name, age, state, n in (
            ("old-succeeded", 10 * DAY, "succeeded", OLD),
            ("old-cancelled", 10 * DAY, "cancelled", 40),  # not named: the 7-day default
            ("failed-1.5d", 1.5 * DAY, "failed", 30),  # --retain failed=2d: kept
            ("young-succeeded", 3600.0, "succeeded", 30),
            ("queued", 10 * DAY, "queued", 20),
            ("running", 10 * DAY, "running", 10),
        ):
            engine = Engine(store, clock=FakeClock(now - age))
            ids = set()
            for _ in range(n):
                # the workers have no handler for the unfinished ones: they stay so
                job = engine.submit("noop" if state in FINISHED else "other", {})
                ids.add(job.id)
                if state == "queued":
                    continue
                if state == "cancelled":
                    engine.cancel(job.id, actor="test", reason="seed")
                    continue
                (leased,) = engine.claim(OWNER, ("default",), 1, ids=[job.id])
                engine.start(job.id, leased.fence)
                if state == "succeeded":
                    engine.succeed(job.id, leased.fence)
                elif state == "failed":
                    engine.fail(job.id, leased.fence, "boom", permanent=True)
            groups[name] = ids
    finally:
        store.close()
    return groups


class Workers:
    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        log = self.tmp / f"worker-{len(self.procs)}.log"
        cmd = [
            *(sys.executable, "-m", "fsm.cli", "worker"),
            *("--app", "tests.integration.retention.app:handlers", "--store", self.url),
            *("--retain", "succeeded=1d", "--retain", "failed=2d", "--retain-every", "1"),
            *("--retain-batch", str(BATCH), "--retain-max-batches", str(MAX_BATCHES)),
            *("--no-scheduler", "--poll-interval", "0.5", "--log-level", "INFO"),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)

    def by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        (proc,) = [p for p in self.procs if p.pid == pid]
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def passes(self) -> list[tuple[str, int, int, int]]:
        """(time, pid, pruned, batches) of every pass line, in time order."""
        out = []
        for log in self.tmp.glob("worker-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                m = PASS.match(line)
                if m:
                    out.append((m[1], int(m[2]), int(m[3]), int(m[4])))
        return sorted(out)


def _holder(store: LeasesServices) -> int | None:
    """The pid of the worker whose lease is current (owner "host/pid N/incarnation")."""
    now = time.time()
    for lease in store.service_leases():
        if lease.name == "retention" and lease.until > now:
            m = re.search(r"/pid (\d+)/", lease.owner)
            return int(m[1]) if m else None
    return None


def _wait(what: str, until: float, check: object) -> None:
    while time.monotonic() < until:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_three_workers_prune_one_at_a_time_within_bounds_across_kill_and_stop(
    url: str, tmp_path: Path
) -> None:
    # given finished jobs past and within their retention, and unfinished ones
    groups = _seed(url)
    store = open_store(url)
    assert isinstance(store, LeasesServices)
    engine = Engine(store)
    workers = Workers(tmp_path, url)
    handovers = 0

    def left(name: str) -> int:
        return sum(1 for i in groups[name] if store.get(i) is not None)

    try:
        # when three workers with --retain run
        for _ in range(3):
            workers.start()
        deadline = time.monotonic() + 120
        _wait("a first pass", deadline, lambda: left("old-succeeded") < OLD)
        # and the holder is killed with work left (its lease must expire)
        victim = _holder(store)
        assert victim is not None
        assert left("old-succeeded") > 0
        workers.by_pid(victim).send_signal(signal.SIGKILL)
        workers.by_pid(victim).wait(timeout=10)
        handovers += 1
        _wait("a new holder", deadline, lambda: _holder(store) not in (None, victim))
        # and the next holder is stopped (it gives its lease up)
        second = _holder(store)
        assert second is not None
        workers.by_pid(second).send_signal(signal.SIGTERM)
        workers.by_pid(second).wait(timeout=60)
        handovers += 1
        # then the last one prunes the rest
        _wait(
            "every job past its retention pruned",
            deadline,
            lambda: left("old-succeeded") == 0 and left("old-cancelled") == 0,
        )
        time.sleep(1.5)  # one more pass: it must prune nothing else
    finally:
        workers.stop()
    try:
        # nothing else was pruned
        for name in ("failed-1.5d", "young-succeeded", "queued", "running"):
            assert left(name) == len(groups[name]), name
        unfinished = ("queued", "running", "leased", "retry_wait", "investigate")
        still = engine.scan(ScanRequest(states=unfinished, limit=1000))
        assert {j.id for j in still} == groups["queued"] | groups["running"]
        # every pass stayed within its bound
        passes = workers.passes()
        assert passes, workers.tmp
        assert all(n <= BATCH * MAX_BATCHES and b <= MAX_BATCHES for _, _, n, b in passes)
        assert sum(n for _, _, n, _ in passes) == OLD + 40
        # one worker pruned at a time: the passes change hands only at the kill and stop
        pids = [pid for _, pid, _, _ in passes]
        changes = sum(1 for a, b in itertools.pairwise(pids) if a != b)
        assert changes <= handovers, pids
        assert len(set(pids)) == 3, pids
    finally:
        store.close()
