"""A kind's policy holds wherever its jobs were submitted (real processes, SIGKILL).

The handler of "pay" is registered not retry-safe with one attempt, in the worker's
app only. A job submitted by `jobfsm submit` (which knows nothing of the kind) or by
an Engine built without that registry must still never run twice when its worker
is killed mid-run: it ends in investigate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fsm import Engine, open_store

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
