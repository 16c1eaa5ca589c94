"""A kind's policy holds wherever its jobs were submitted (real processes, SIGKILL).

The handler's policy is the policy of record, stamped onto the job when a worker
starts it. The handler of "pay" is registered not retry-safe with one attempt, in the
worker's app only. A job submitted by `jobfsm submit` (which knows nothing of the
kind) or by an Engine built without that registry must still never run twice when
its worker is killed mid-run: it ends in investigate. A retry-safe handler ("sleep")
loosens the fail-closed default of such a submitter: a lost run is re-run once,
unless the submitter said `retry_safe=False` for the job itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from fsm import AsyncEngine, Engine, open_store

from .helpers import REPO, Workers, markers, wait_for


def _submit_with_the_cli(store_url: str, payload: dict[str, object]) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsm.cli",
            "submit",
            "pay",
            "--payload",
            json.dumps(payload),
            "--store",
            store_url,
            "--json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return str(json.loads(out)["job"]["id"])


def _killed_mid_run(
    store_url: str, job_id: str, workers: Workers, marks: Path, engine: Engine
) -> None:
    a = workers.start(store_url, ttl=30.0)
    wait_for(lambda: markers(marks, job_id, "started", 1), 20, "A to start the payment")
    b = workers.start(store_url, ttl=30.0)
    workers.wait_serving(b)
    workers.kill9(a)
    wait_for(lambda: engine.get(job_id).state == "investigate", 10, "the payment to be parked")


def test_a_job_submitted_by_the_cli_follows_its_handlers_policy_after_a_kill(
    store_url: str, workers: Workers, marks: Path
) -> None:
    # given a payment submitted by `jobfsm submit`, which has no handler registry
    job_id = _submit_with_the_cli(store_url, {"dir": str(marks), "first": 60})
    engine = Engine(open_store(store_url))
    try:
        stored = engine.get(job_id)
        assert stored.retry_safe is False  # unknown to the submitter: stored fail-closed
        assert stored.max_attempts == 10
        # when the worker running it is killed with SIGKILL
        _killed_mid_run(store_url, job_id, workers, marks, engine)
        # then it is parked for an operator and never ran a second time
        job = engine.get(job_id)
        assert (job.state, job.retry_safe, job.max_attempts) == ("investigate", False, 1)
        assert not markers(marks, job_id, "started", 2)
        start = next(e for e in engine.history(job_id) if e.event == "start")
        assert start.data["effective_policy"]["max_attempts"] == 1
        assert start.data["effective_policy"]["retry_safe"] is False
    finally:
        engine.store.close()


def test_a_submitter_that_says_retry_safe_cannot_overrule_the_handler(
    store_url: str, workers: Workers, marks: Path, open_engine: Callable[[str], Engine]
) -> None:
    # given an Engine without the registry, submitting the payment as retry-safe
    bare = Engine(open_store(store_url))
    try:
        job = bare.submit("pay", {"dir": str(marks), "first": 60}, retry_safe=True)
        assert job.retry_safe is True
        engine = open_engine(store_url)
        # when its worker is killed mid-run
        _killed_mid_run(store_url, job.id, workers, marks, engine)
        # then the handler's policy won at start: parked, never re-run
        after = engine.get(job.id)
        assert (after.state, after.retry_safe, after.recoveries) == ("investigate", False, 1)
        assert not markers(marks, job.id, "started", 2)
    finally:
        bare.store.close()


async def _submit_without_kinds(store_url: str, kind: str, payload: Any, **opts: Any) -> str:
    """A web process's submit: `AsyncEngine.open(url)` with no `kinds=`."""
    async with await AsyncEngine.open(store_url) as engine:
        job = await engine.submit(kind, payload, **opts)
        assert (job.retry_safe, job.retry_safe_pinned) == (False, "retry_safe" in opts)
        return job.id


def _kill_the_first_run(store_url: str, job_id: str, workers: Workers, marks: Path) -> None:
    a = workers.start(store_url, ttl=30.0)
    wait_for(lambda: markers(marks, job_id, "started", 1), 20, "A to start the job")
    b = workers.start(store_url, ttl=30.0)
    workers.wait_serving(b)
    workers.kill9(a)


class Case(NamedTuple):
    kind: str
    opts: dict[str, Any]
    ends: str
    runs: int
    stamped: bool


@pytest.mark.parametrize(
    "case",
    [
        # the handler is retry-safe: its policy loosens the submitter's fail-closed default
        Case("sleep", {}, "succeeded", 2, True),
        # the handler is not retry-safe: parked for an operator
        Case("sleep_unsafe", {}, "investigate", 1, False),
        # the submitter said retry_safe=False for this job: no handler loosens it
        Case("sleep", {"retry_safe": False}, "investigate", 1, False),
    ],
    ids=["retry-safe-handler", "unsafe-handler", "explicit-false"],
)
def test_the_handlers_policy_decides_a_lost_run_of_a_job_submitted_without_kinds(
    store_url: str, workers: Workers, marks: Path, case: Case
) -> None:
    kind, opts, ends, runs, stamped = case
    # given a job submitted by a process that knows no kinds (stored fail-closed)
    payload = {"dir": str(marks), "first": 60, "then": 0}
    job_id = asyncio.run(_submit_without_kinds(store_url, kind, payload, **opts))
    # when the worker running it is killed with SIGKILL mid-run
    _kill_the_first_run(store_url, job_id, workers, marks)
    engine = Engine(open_store(store_url))
    try:
        wait_for(lambda: engine.get(job_id).state == ends, 20, f"the job to end {ends}")
        # then the handler's policy, stamped at start, decided: re-run once, or parked
        job = engine.get(job_id)
        assert (job.retry_safe, job.recoveries) == (stamped, 1)
        assert len(markers(marks, job_id, "started")) == runs
        starts = [e for e in engine.history(job_id) if e.event == "start"]
        assert len(starts) == runs
        assert all(e.data["effective_policy"]["retry_safe"] is stamped for e in starts)
        if opts:
            assert starts[0].data["effective_policy"]["retry_safe_pinned"] is True
    finally:
        engine.store.close()
