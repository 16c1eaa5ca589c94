"""benchmarks/dashboard_bounds.py runs and reports each page's bytes (never a timing)."""

from __future__ import annotations

import re
import subprocess
import sys

from .browser import ROOT


def test_the_bounds_benchmark_runs_at_a_small_size() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/dashboard_bounds.py", "--entries", "1200",
         "--queues", "120", "--samples", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^(job page|overview|investigate).*?([\d,]+)  < 1 s", done.stdout, re.M)
    assert [r[0] for r in rows] == ["job page", "overview", "investigate"]
    assert all(int(r[1].replace(",", "")) < 1_000_000 for r in rows)
