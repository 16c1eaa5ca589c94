"""`python -m benchmarks.unique` at smoke size on a real SQLite file: every shape runs,
the racing submitters of the same keys store one job per key, and the ratios follow
from the rows printed. No figure is held to a bound (a test never times performance)."""

from __future__ import annotations

import re

import pytest

from benchmarks.unique import BASELINE, SHAPES, ratios

from ._cli import ROOT, run_module

ROW = re.compile(
    r"^\W*(" + "|".join(map(re.escape, SHAPES)) + r")\W+([\d,]+)\W+([\d,]+)\W+([\d.]+)x\W"
)


def test_every_shape_runs_racers_store_one_job_per_key_and_ratios_follow_from_the_rows() -> None:
    args = ("--store", "sqlite", "--jobs", "40", "--racers", "4", "--repeats", "1")
    done = run_module("benchmarks.unique", *args, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {
        m.group(1): (float(m.group(2).replace(",", "")), int(m.group(3)), float(m.group(4)))
        for line in done.stdout.splitlines()
        if (m := ROW.match(line))
    }
    assert sorted(rows) == sorted(SHAPES), done.stdout
    assert all(rate > 0 for rate, _stored, _ratio in rows.values())
    # one job per submit, but one per key when 4 racers submit the same 10 keys
    assert {s: stored for s, (_r, stored, _x) in rows.items()} == {
        **dict.fromkeys(SHAPES, 40),
        "unique, racing": 10,
    }
    for shape, (rate, _stored, ratio) in rows.items():
        assert ratio == pytest.approx(rate / rows[BASELINE[shape]][0], rel=0.02, abs=0.01)
    summary = done.stdout.splitlines()[-1]
    assert f"unique, new keys {rows['unique, new keys'][2]:.2f}x" in summary


def test_the_ratios_are_to_each_shapes_baseline() -> None:
    median = dict.fromkeys(SHAPES, 100.0) | {"plain, racing": 50.0, "unique, new keys": 80.0}
    got = ratios(median)
    assert got["unique, new keys"] == 0.8
    assert got["unique, racing"] == 2.0
    assert got["plain"] == got["plain, racing"] == 1.0
