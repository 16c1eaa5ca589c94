"""`python -m benchmarks.submit_cost` at smoke size: both modes submit against the real
PostgreSQL server and RabbitMQ broker, every wake-up is confirmed, and the ratios follow
from the measured rows. No figure is held to a bound (a test never times performance)."""

from __future__ import annotations

import re

import pytest

from ._cli import ROOT, run_module

TIMEOUT = 180
ROW = re.compile(
    r"^\s*(no publisher|RabbitMQ wake-ups): +([\d,]+) jobs/s, CPU +([\d.]+) us/job "
    r"\(user ([\d.]+), system ([\d.]+)\), ([\d.]+) voluntary context switches per job$"
)


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_both_modes_submit_and_the_ratios_follow_from_the_rows(
    pg_server: str, rabbit_url: str
) -> None:
    args = ("--jobs", "600", "--repeats", "1")
    done = run_module("benchmarks.submit_cost", *args, cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-6000:]
    rows = {
        m.group(1): [float(g.replace(",", "")) for g in m.groups()[1:]]
        for line in done.stdout.splitlines()
        if (m := ROW.match(line))
    }
    assert sorted(rows) == ["RabbitMQ wake-ups", "no publisher"]
    for rate, cpu, user, system, _switches in rows.values():
        assert rate > 0
        assert cpu == pytest.approx(user + system, abs=0.15)  # each printed to 0.1
    base, wake = rows["no publisher"], rows["RabbitMQ wake-ups"]
    summary = done.stdout.splitlines()[-1]
    ratio = re.search(r"wake-ups ([\d.]+)x the rate and ([\d.]+)x the CPU", summary)
    assert ratio is not None, summary
    assert float(ratio.group(1)) == pytest.approx(wake[0] / base[0], abs=0.01)
    assert float(ratio.group(2)) == pytest.approx(wake[1] / base[1], abs=0.01)
