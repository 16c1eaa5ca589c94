"""`python -m benchmarks.heartbeat_reports` at smoke size, on real SQLite and PostgreSQL.

No figure is held to a speed (a test never times performance). What it checks is
what the benchmark is for: the baseline drains without a renewal, the other run
renews leases while it drains, and its reports are still written in batches, not
one store write per job (which is what every report past a heartbeat cost before
`Engine.report_many` wrote the moved ones together).
"""

from __future__ import annotations

import re

import pytest

from ._cli import ROOT, run_module

TIMEOUT = 240
ROW = re.compile(
    r"^\s+(baseline|past heartbeats)\s+([\d,]+) jobs/s\s+([\d,]+) us/job CPU\s+"
    r"([\d.]+) report writes/job\s+([\d.]+) renewals/job$"
)


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.postgres
def test_jobs_past_heartbeats_are_reported_in_batches(pg_server: str) -> None:
    args = ("--jobs", "300", "--slots", "32", "--seconds", "0.3", "--rounds", "1")
    done = run_module("benchmarks.heartbeat_reports", *args, cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-6000:]
    rows = [m.groups() for line in done.stdout.splitlines() if (m := ROW.match(line))]
    assert [r[0] for r in rows] == ["baseline", "past heartbeats"] * 2  # SQLite, PostgreSQL
    for name, rate, cpu, writes, renewals in rows:
        assert float(rate.replace(",", "")) > 0
        assert float(cpu.replace(",", "")) > 0
        if name == "baseline":
            assert float(renewals) == 0
        else:
            assert float(renewals) >= 1  # every job ran past at least one renewal
        # 32 slots: batches of several reports, far from one write per report
        assert float(writes) < 0.5, (name, writes)
    assert done.stdout.count("ratio") == 2
