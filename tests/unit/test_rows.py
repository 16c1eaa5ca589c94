"""The shared record <-> row helpers of the SQL stores (adapters/rows.py)."""

from __future__ import annotations

import pytest

from adapters.rows import (
    JOB_COLUMNS,
    job_from_row,
    job_from_values,
    job_to_row,
    owner_from_text,
    owner_to_text,
)
from fsm.records import Job, Owner

OWNER = Owner(host="host-a", pid=41, incarnation="inc-1")


def _jobs() -> list[Job]:
    base = Job(
        id="01J0000000000000000000000A",
        kind="noop",
        queue="bench",
        payload_json='{"n": 1}',
        state="queued",
        created_at=1.5,
        updated_at=2.25,
        run_after=1.5,
    )
    leased = Job(**{**job_to_row(base), "owner": OWNER, "state": "leased", "fence": 3})
    return [base, leased, Job(**{**job_to_row(base), "retry_safe": False, "deadline": 9.0})]


@pytest.mark.parametrize("job", _jobs())
def test_job_from_values_matches_job_from_row(job: Job) -> None:
    # given a job as the stores write it (owner as text, retry_safe as 0/1 in SQLite)
    row = job_to_row(job)
    row["retry_safe"] = int(row["retry_safe"])
    # when it is read back positionally and by name
    positional = job_from_values([row[c] for c in JOB_COLUMNS])
    by_name = job_from_row(row)
    # then both give the same record, equal to the one written
    assert positional == by_name == job
    assert type(positional.retry_safe) is bool


def test_job_from_values_refuses_a_row_of_the_wrong_width() -> None:
    row = [job_to_row(_jobs()[0])[c] for c in JOB_COLUMNS]
    with pytest.raises(ValueError, match="columns"):
        job_from_values(row[:-1])


def test_owner_text_round_trips_through_the_caches() -> None:
    text = owner_to_text(OWNER)
    assert text == owner_to_text(Owner(host="host-a", pid=41, incarnation="inc-1"))
    assert owner_from_text(text) == OWNER
    assert owner_to_text(None) is None
    assert owner_from_text(None) is None
