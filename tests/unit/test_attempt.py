"""fsm.ports.Attempt: the job's JSON is made only for executors that read it."""

from __future__ import annotations

import threading

from fsm.ports import Attempt, Outcome
from fsm.records import Job, Owner, job_from_json, job_to_json


def _job() -> Job:
    return Job(
        id="01J0000000000000000000000B",
        kind="noop",
        queue="default",
        payload_json="{}",
        state="running",
        created_at=1.0,
        updated_at=2.0,
        run_after=1.0,
        fence=2,
        owner=Owner(host="h", pid=7, incarnation="i"),
    )


def _attempt(**extra: str) -> Attempt:
    return Attempt(
        job=_job(),
        timeout=1.0,
        target="m:f",
        run=lambda: Outcome(status="succeeded"),
        cancelled=threading.Event(),
        **extra,
    )


def test_job_json_left_out_is_made_from_the_job_on_first_read() -> None:
    attempt = _attempt()
    assert attempt.job_json == job_to_json(attempt.job)
    assert job_from_json(attempt.job_json) == attempt.job
    assert attempt.job_json is attempt.job_json  # made once


def test_job_json_given_is_kept_as_given() -> None:
    assert _attempt(job_json='{"given": true}').job_json == '{"given": true}'
