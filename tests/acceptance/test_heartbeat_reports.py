"""`python -m benchmarks.heartbeat_reports` at smoke size, on real SQLite and PostgreSQL.

No figure is held to a bound (a test never times performance, and how many reports
share a write or how many renewals land in a job depend on how busy the machine is).
What it checks: both runs drain on both stores, the baseline renews no lease (its
heartbeat interval is an hour), the other run renews leases while it drains, and the
ratio line is the quotient of the two rows printed above it.
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
RATIO = re.compile(r"^\s+ratio\s+([\d.]+)x rate\s+([\d.]+)x CPU per job\s+([\d.]+)x report writes$")


def quotient_of_rounded(a: float, b: float, half: float) -> tuple[float, float]:
    """The range a/b may span when both were printed rounded to +-`half`, widened by the
    ratio's own rounding to 0.01."""
    return (a - half) / (b + half) - 0.005, (a + half) / max(b - half, 1e-9) + 0.005


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.postgres
def test_both_runs_drain_and_the_ratio_line_divides_the_rows(pg_server: str) -> None:
    args = ("--jobs", "300", "--slots", "32", "--seconds", "0.3", "--rounds", "1")
    done = run_module("benchmarks.heartbeat_reports", *args, cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-6000:]
    lines = done.stdout.splitlines()
    rows = [
        [m.group(1), *(float(g.replace(",", "")) for g in m.groups()[1:])]
        for line in lines
        if (m := ROW.match(line))
    ]
    ratios = [[float(g) for g in m.groups()] for line in lines if (m := RATIO.match(line))]
    assert [r[0] for r in rows] == ["baseline", "past heartbeats"] * 2  # SQLite, PostgreSQL
    assert len(ratios) == 2
    for n, (rate_x, cpu_x, writes_x) in enumerate(ratios):
        (_, b_rate, b_cpu, b_writes, b_renewed), (_, p_rate, p_cpu, p_writes, p_renewed) = rows[
            2 * n : 2 * n + 2
        ]
        assert min(b_rate, p_rate, b_cpu, p_cpu) > 0
        assert min(b_writes, p_writes) > 0  # reports were written
        assert b_renewed == 0  # no heartbeat within the drain
        assert p_renewed > 0  # leases renewed while jobs ran past heartbeats
        low, high = quotient_of_rounded(p_rate, b_rate, 0.5)
        assert low <= rate_x <= high
        low, high = quotient_of_rounded(p_cpu, b_cpu, 0.5)
        assert low <= cpu_x <= high
        low, high = quotient_of_rounded(p_writes, b_writes, 0.005)
        assert low <= writes_x <= high
