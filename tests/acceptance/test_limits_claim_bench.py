"""`python -m benchmarks.limits_claim` at smoke size: every mode finishes every job on a
real SQLite file and a real PostgreSQL database, and the ratio lines follow from the
rows printed (jobs per wall second, jobs per CPU second; with one repeat, its own pair's
ratio is the ratio of the rows, lowest and highest alike). No figure is held to a bound
(a test never times performance)."""

from __future__ import annotations

import re

import pytest

from ._cli import ROOT, run_module

MODES = ("no limits", "concurrency limit", "concurrency + rate", "beside capped kind")
ROW = re.compile(
    r"^\s+(" + "|".join(re.escape(m) for m in MODES) + r")\s+([\d,]+) jobs/s\s+([\d.]+) us CPU/job$"
)


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_every_mode_runs_and_the_ratios_follow_from_the_rows(store: str) -> None:
    args = ("--store", store, "--jobs", "120", "--claimers", "2", "--repeats", "1")
    args += ("--capped", "40")
    done = run_module("benchmarks.limits_claim", *args, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {
        m.group(1): (float(m.group(2).replace(",", "")), float(m.group(3)))
        for line in done.stdout.splitlines()
        if (m := ROW.match(line))
    }
    assert sorted(rows) == sorted(MODES)
    assert all(rate > 0 and cpu > 0 for rate, cpu in rows.values())
    lines = done.stdout.splitlines()
    (rates,) = [line for line in lines if line.startswith("ratio to no limits (same run)")]
    (pairs,) = [line for line in lines if line.startswith("ratio to no limits, median of")]
    (costs,) = [line for line in lines if line.startswith("jobs per CPU second")]
    (base_rate, base_cpu) = rows["no limits"]
    for mode in MODES[1:]:
        ratio = re.search(re.escape(mode) + r" ([\d.]+)x", rates)
        assert ratio is not None, rates
        assert float(ratio.group(1)) == pytest.approx(rows[mode][0] / base_rate, abs=0.02)
        pair = re.search(re.escape(mode) + r" ([\d.]+)x \[([\d.]+)x, ([\d.]+)x\]", pairs)
        assert pair is not None, pairs
        assert {float(pair.group(i)) for i in (1, 2, 3)} == {float(ratio.group(1))}
        spent = re.search(re.escape(mode) + r" ([\d.]+)x", costs)
        assert spent is not None, costs
        assert float(spent.group(1)) == pytest.approx(base_cpu / rows[mode][1], abs=0.02)


def test_each_mode_runs_first_once_in_as_many_repeats_as_modes() -> None:
    from benchmarks.limits_claim import rotated, spread

    firsts = [rotated(r)[0] for r in range(len(MODES))]
    assert sorted(firsts) == sorted(MODES)
    assert all(sorted(rotated(r)) == sorted(MODES) for r in range(len(MODES)))
    assert spread([0.9, 1.0, 0.8]) == "0.90x [0.80x, 1.00x]"
