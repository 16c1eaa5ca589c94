"""Real-process chaos at a small size (scenario S02, S07; invariants I1, I3, I6-I8).

Three `jobfsm worker` processes run 200 jobs of four kinds (fast, slow, flaky,
retry-unsafe), arriving in waves over 15 s, while a killer SIGKILLs a random
worker every 1-2 s for 20 s and starts a fresh one in its place. Once the kills
stop, the workers get up to 90 s to finish (they usually need a few seconds; the
bound is for a loaded machine). benchmarks/chaos.py runs the same at a large
size; docs/reliability.md has its figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos import run_chaos

JOBS = 200
WORKERS = 3


def _chaos(url: str, tmp_path: Path) -> None:
    # given 200 jobs and three workers that keep being killed with SIGKILL
    result = run_chaos(
        url, jobs=JOBS, workers=WORKERS, workdir=tmp_path, chaos_seconds=20, settle_seconds=90
    )
    # then the killer really killed, and nothing was lost, doubled or left unexplained
    assert result.kills >= 5, result.summary()
    assert result.ok, result.summary()
    assert sum(result.states.values()) == JOBS


def test_killed_sqlite_workers_lose_no_job_and_commit_no_effect_twice(
    sqlite_url: str, tmp_path: Path
) -> None:
    _chaos(sqlite_url, tmp_path)


@pytest.mark.postgres
def test_killed_postgres_workers_lose_no_job_and_commit_no_effect_twice(
    pg_url: str, tmp_path: Path
) -> None:
    _chaos(pg_url, tmp_path)
