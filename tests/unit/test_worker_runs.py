"""The worker's run table keeps its counts (running, unreported) with its runs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fsm.service.identity import Identity
from fsm.worker.runs import Run, Runs

from .helpers import job_in

OPS = ("add", "end", "report", "lose", "finish")


def _run(i: int, fence: int) -> Run:
    return Run(job_in("running", id=f"job-{i}", fence=fence), None)


@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5), st.integers(1, 2)), max_size=80))
@settings(max_examples=300, deadline=None)
def test_the_counts_always_equal_a_scan_of_the_runs(ops: list[tuple[str, int, int]]) -> None:
    # invariant: whatever order runs are added, ended, reported, lost and finished in
    # (twice, or after a newer run of the same job took the key), load() and
    # in_flight() equal what a scan of the table finds
    runs = Runs(Identity())
    made: dict[tuple[int, int], Run] = {}
    for op, i, fence in ops:
        run = made.get((i, fence))
        if op == "add" or run is None:
            run = made[(i, fence)] = _run(i, fence)
            runs.add(run)
        elif op == "end":
            runs.end(run)
        elif op == "report":
            runs.start_reporting(run)
        elif op == "lose":
            runs.lose(run)
        else:
            runs.finish(run)
        table = runs.all()
        assert runs.load() == (sum(not r.ended for r in table), len(table))
        assert runs.in_flight() == sum(not r.reporting for r in table)
