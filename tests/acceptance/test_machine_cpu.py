"""`python -m benchmarks.machine_cpu` at smoke size: it completes against the real
PostgreSQL server, RabbitMQ broker and dramatiq, and its table is consistent.

The figures are not checked against any bound (a test never times performance);
this checks that every system drained, that each share was measured, and that the
derived rows follow from the measured ones.
"""

from __future__ import annotations

import pytest

from benchmarks.machine import CORES

from ._cli import ROOT, run_module

TIMEOUT = 240
SYSTEMS = ("jobfsm PostgreSQL, polling", "jobfsm PostgreSQL + RabbitMQ", "dramatiq (no confirms)")


def _number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%"))


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.postgres
@pytest.mark.rabbitmq
@pytest.mark.peers
def test_every_system_drains_and_the_table_adds_up(pg_server: str, rabbit_url: str) -> None:
    args = ("--jobs", "400", "--repeats", "1", "--jobfsm", "1x16", "--dramatiq", "1x4")
    done = run_module("benchmarks.machine_cpu", *args, "--markdown", cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-6000:]
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("|  |"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == list(SYSTEMS)
    rows = {
        cells[0]: [_number(c) for c in cells[1:]]
        for line in lines
        if line.startswith("| ") and not line.startswith("|  |")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert all(rate > 0 for rate in rows["jobs/s"])
    parts = [name for name in rows if name.endswith(", us/job") and name != "all, us/job"]
    assert len(parts) == 5  # workers, PostgreSQL, RabbitMQ, this process, the rest
    for i, system in enumerate(SYSTEMS):
        # one repeat: "all" is the sum of the shares (each rounded to a microsecond)
        total = sum(rows[p][i] for p in parts)
        assert rows["all, us/job"][i] == pytest.approx(total, abs=len(parts)), system
        assert rows["worker processes, us/job"][i] > 0, system
        assert 0 < rows["cores busy"][i] <= 100, system
        ceiling = CORES * 1e6 / rows["all, us/job"][i]
        assert rows[f"ceiling: jobs/s with all {CORES} cores busy"][i] == pytest.approx(
            ceiling, rel=0.01
        )
    # each store-backed system's server did work; dramatiq's broker did
    assert rows["PostgreSQL server, us/job"][0] > 0
    assert rows["RabbitMQ server, us/job"][2] > 0
    reading = [line for line in lines if line.startswith("- ")]
    assert len(reading) == 3
    assert reading[0].startswith("- RabbitMQ / polling: ")
    assert reading[1].startswith("- RabbitMQ / dramatiq: ")
    assert reading[2].startswith("- 1.5x dramatiq is ")
