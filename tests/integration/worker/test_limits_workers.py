"""Global limits under real worker processes (docs/flow-control.md).

Several `jobfsm worker` processes with threads serve one store (a SQLite file, a
PostgreSQL database); a kind is limited to a few running at once and to a rate,
another kind of the same queue is not, and a worker is killed with SIGKILL while
it holds limited jobs (a replacement starts). From the audit trails: never more
than the limit held a slot at any instant, never more leases than the rate in any
window, every job of both kinds succeeded. The size every run keeps (CI's included) is
`ci`: 3 workers x 4 threads, 2 at once, 20 leases/s, one kill, enough to fill the limit
on several processes and break it if it leaked through a kill. `pytest --issue-size`
adds the issue's size (8 workers x 32 threads, 5 at once, 50 leases/s, a kill every 2 s):
the same checks, 20 s of CPU on 2 cores (#38).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import pytest

from fsm import Engine, Job
from fsm.ports import ScanRequest
from fsm.testing.faults_limits import (
    concurrency_breaches,
    holding_intervals,
    lease_times,
    rate_breaches,
)

from .helpers import Workers, wait_for


@attrs.frozen
class Size:
    workers: int
    threads: int
    limited_jobs: int
    free_jobs: int
    concurrency: int
    rate: int
    kill_every: float
    kills: int


CI = Size(workers=3, threads=4, limited_jobs=40, free_jobs=30, concurrency=2, rate=20,
          kill_every=1.5, kills=1)  # fmt: skip
ISSUE = Size(workers=8, threads=32, limited_jobs=600, free_jobs=2000, concurrency=5, rate=50,
             kill_every=2.0, kills=5)  # fmt: skip
#: kills of a worker seen running a limited job until one still held it at death (a
#: limited job runs 0.1 s: it may finish between the look and the kill)
KILL_TRIES = 5


@pytest.mark.parametrize(
    "size",
    [CI, pytest.param(ISSUE, marks=[pytest.mark.slow, pytest.mark.issue_size])],
    ids=["ci", "issue"],
)
def test_a_global_limit_holds_across_worker_processes_through_kill_9(
    store_url: str,
    workers: Workers,
    open_engine: Callable[[str], Engine],
    size: Size,
) -> None:
    # given a kind limited to N at once and R leases per second, a free kind beside it,
    # and worker processes with threads serving the store
    engine = open_engine(store_url)
    engine.set_limit(
        "kind:sleep",
        concurrency=size.concurrency,
        rate=size.rate,
        period=1.0,
        actor="test",
        reason="a vendor's cap",
    )
    procs = [
        workers.start(store_url, concurrency=size.threads, ttl=3.0, heartbeat=0.5)
        for _ in range(size.workers)
    ]
    for proc in procs:
        workers.wait_serving(proc)
    # when jobs of both kinds are submitted, and workers running limited jobs are
    # killed with -9 (a replacement starts each time)
    limited = engine.submit_many(
        [("sleep", {"first": 0.05, "then": 0.05}, {}) for _ in range(size.limited_jobs)]
    )
    free = engine.submit_many([("noop", {}, {}) for _ in range(size.free_jobs)])
    ids = [j.id for j in [*limited, *free]]

    def finished() -> int:
        return sum(1 for i in ids if engine.get(i).state == "succeeded")

    # limited jobs (id, fence) whose worker was killed while holding them
    killed: list[tuple[str, int]] = []
    for k in range(size.kills):
        if k:
            time.sleep(size.kill_every)
        for _ in range(KILL_TRIES):
            n = _worker_running_limited(engine, limited, [p.pid for p in procs])
            pid = procs[n].pid
            workers.kill9(procs[n])
            procs[n] = workers.start(store_url, concurrency=size.threads, ttl=3.0, heartbeat=0.5)
            # a job seen running may have finished before the kill landed: only what the
            # dead process still holds (nothing can change it now) is a lost run
            held = _held_by(engine, limited, pid)
            if held:
                killed += held
                break
        else:
            pytest.fail(f"{KILL_TRIES} kills in a row found no limited job held at death")
    wait_for(lambda: finished() == len(ids), 300.0, "every job to succeed", step=0.5)

    # then the audit trails never show more than N holding a slot, nor R leases in 1 s
    intervals: list[tuple[float, float]] = []
    leases: list[float] = []
    for job in limited:
        trail = engine.history(job.id)
        intervals += holding_intervals(trail)
        leases += lease_times(trail)
    assert len(leases) >= size.limited_jobs
    assert concurrency_breaches(intervals, lambda t: size.concurrency) == []
    assert rate_breaches(leases, size.rate, 1.0) == []
    # and each job that lost its worker was taken back and run again. A PostgreSQL server
    # still runs a COMMIT the killed worker sent just before its death: a job read as held
    # right after the kill whose report committed under that same fence did not lose its run
    for job_id, fence in killed:
        trail = engine.history(job_id)
        if any(e.event == "succeed" and e.fence == fence for e in trail if e.outcome == "applied"):
            continue
        assert "expire" in [e.event for e in trail], (job_id, fence, [e.event for e in trail])
    # and the free kind of the same queue ran to the end beside it
    assert {engine.get(j.id).state for j in free} == {"succeeded"}


def _worker_running_limited(engine: Engine, limited: list[Job], pids: list[int]) -> int:
    """The index in `pids` of a worker seen running a limited job."""
    found: list[int] = []

    def seen() -> bool:
        for job in (engine.get(j.id) for j in limited):
            if job.state == "running" and job.owner is not None and job.owner.pid in pids:
                found.append(pids.index(job.owner.pid))
                return True
        return False

    wait_for(seen, 60.0, "a worker running a limited job", step=0.01)
    return found[0]


def _held_by(engine: Engine, limited: list[Job], pid: int) -> list[tuple[str, int]]:
    """The limited jobs (id, fence) a (dead) worker process still holds a lease on, in one
    read right after its death: the other workers' sweeps soon take them back."""
    ids = {j.id for j in limited}
    held = engine.scan(ScanRequest(states=("leased", "running"), limit=10_000))
    return [
        (job.id, job.fence)
        for job in held
        if job.id in ids and job.owner is not None and job.owner.pid == pid
    ]
