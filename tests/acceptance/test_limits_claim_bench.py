"""`python -m benchmarks.limits_claim` at smoke size: every mode finishes every job on a
real SQLite file, and the ratios follow from the rows printed. No figure is held to a
bound (a test never times performance)."""

from __future__ import annotations

import re

import pytest

from ._cli import ROOT, run_module

ROW = re.compile(r"^\s+(no limits|concurrency limit|concurrency \+ rate)\s+([\d,]+) jobs/s$")


def test_every_mode_runs_and_the_ratios_follow_from_the_rows() -> None:
    args = ("--store", "sqlite", "--jobs", "120", "--claimers", "2", "--repeats", "1")
    done = run_module("benchmarks.limits_claim", *args, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {
        m.group(1): float(m.group(2).replace(",", ""))
        for line in done.stdout.splitlines()
        if (m := ROW.match(line))
    }
    assert sorted(rows) == ["concurrency + rate", "concurrency limit", "no limits"]
    assert all(rate > 0 for rate in rows.values())
    summary = done.stdout.splitlines()[-1]
    ratios = re.search(r"concurrency limit ([\d.]+)x, concurrency \+ rate ([\d.]+)x", summary)
    assert ratios is not None, summary
    base = rows["no limits"]
    assert float(ratios.group(1)) == pytest.approx(rows["concurrency limit"] / base, abs=0.02)
    assert float(ratios.group(2)) == pytest.approx(rows["concurrency + rate"] / base, abs=0.02)
