"""`python -m benchmarks.limits_claim` at smoke size: every mode finishes every job on a
real SQLite file, and the ratios follow from the rows printed. No figure is held to a
bound (a test never times performance)."""

from __future__ import annotations

import re

import pytest

from ._cli import ROOT, run_module

MODES = ("no limits", "concurrency limit", "concurrency + rate", "beside capped kind")
ROW = re.compile(r"^\s+(" + "|".join(re.escape(m) for m in MODES) + r")\s+([\d,]+) jobs/s$")


def test_every_mode_runs_and_the_ratios_follow_from_the_rows() -> None:
    args = ("--store", "sqlite", "--jobs", "120", "--claimers", "2", "--repeats", "1")
    args += ("--capped", "40")
    done = run_module("benchmarks.limits_claim", *args, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {
        m.group(1): float(m.group(2).replace(",", ""))
        for line in done.stdout.splitlines()
        if (m := ROW.match(line))
    }
    assert sorted(rows) == sorted(MODES)
    assert all(rate > 0 for rate in rows.values())
    summary = done.stdout.splitlines()[-1]
    base = rows["no limits"]
    for mode in MODES[1:]:
        ratio = re.search(re.escape(mode) + r" ([\d.]+)x", summary)
        assert ratio is not None, summary
        assert float(ratio.group(1)) == pytest.approx(rows[mode] / base, abs=0.02)
