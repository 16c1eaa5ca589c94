"""`python -m benchmarks.dashboard` at a small size on PostgreSQL: it logs in, requests
every page the app serves (it stops when a GET route is missing from its list) and
each live fragment, and prints a size for each (no timing is held to a bound here). The live
hour is 300 jobs, not 2,000: run one by one through the Engine, they were most of its time."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from .browser import ROOT

ROW = re.compile(r"^(page|frag)  (.+?)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d,]+)  (met|not met)$")


def test_the_dashboard_benchmark_requests_every_page_at_a_small_size(pg_server: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.dashboard", "--finished", "2000",
         "--samples", "1", "--trail", "1200", "--live", "300"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "JOBFSM_TEST_PG": pg_server},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [m.groups() for line in done.stdout.splitlines() if (m := ROW.match(line))]
    shown = {what for _kind, what, _size, _met in rows}
    for page in (
        "overview /",
        "job page, 1200 entries",
        "job, 1200 entries, ?machine=1",
        "job, 1200 entries, middle page",
        "job page with a DAG (deps)",
        "search cursor mid-table",
        "schedules /schedules",
        "limits /limits",
        "workers /workers",
        "investigate inbox",
        "bulk preview requeue failed",
    ):
        assert page in shown, page  # fmt: skip
    assert sum(kind == "frag" for kind, *_ in rows) >= 10
    assert all(int(size.replace(",", "")) < 1_000_000 for _k, _w, size, _m in rows)
    assert re.search(r"^# worst page p95: [\d.]+ ms .*; largest [\d,]+ bytes", done.stdout, re.M)
