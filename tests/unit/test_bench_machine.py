"""benchmarks.machine: the whole machine's CPU over a window, split per component.

Real processes burn real CPU here; the figures come from /proc as in a benchmark run.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchmarks.machine import (
    CLIENT,
    CORES,
    OTHER,
    SERVERS,
    WORKERS,
    Meter,
    machine_cpu,
    process_cpu,
)

BURN_S = 0.6  # CPU seconds the stand-in worker burns
TICK_S = 0.02  # two of /proc's 10 ms ticks: the reading's granularity

BURNER = f"""
import sys, time
print("ready", flush=True)
sys.stdin.readline()  # burns only once the meter runs: its start-up is not counted
end = time.process_time() + {BURN_S}
while time.process_time() < end:
    pass
print("done", flush=True)
sys.stdin.read()  # stays alive (and readable in /proc) until the test closes stdin
"""


def _burner() -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def test_the_worker_and_a_bystander_land_in_their_shares_which_add_up_to_the_busy_machine() -> None:
    worker, bystander = _burner(), _burner()  # the bystander is no named component
    try:
        meter = Meter()
        busy_before, _ = machine_cpu()
        meter.start(lambda: process_cpu(worker.pid))
        for child in (worker, bystander):
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in (worker, bystander):
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "done"
        meter.stop(jobs=2)
        busy = machine_cpu()[0] - busy_before
    finally:
        for child in (worker, bystander):
            child.communicate("", timeout=30)
    parts = meter.per_job
    assert set(parts) == {WORKERS, *SERVERS.values(), CLIENT, OTHER}
    # per job: each child's CPU over the window, halved by jobs=2
    assert parts[WORKERS] == pytest.approx(BURN_S / 2 * 1e6, abs=TICK_S / 2 * 1e6)
    assert parts[OTHER] == pytest.approx(BURN_S / 2 * 1e6, abs=2 * CORES * TICK_S / 2 * 1e6)
    assert all(v >= 0 for v in parts.values())
    # the named shares and the rest together are the machine's busy time (per job)
    assert meter.total * 2 / 1e6 == pytest.approx(busy, abs=CORES * TICK_S)
    # two burning children kept most of the machine's cores busy through the window
    assert meter.busy >= 0.2
    assert meter.busy <= 1.0
    assert meter.ceiling == pytest.approx(CORES * 1e6 / meter.total)


def test_this_process_is_the_client_share() -> None:
    meter = Meter()
    meter.start(lambda: 0.0)
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    meter.stop(jobs=1)
    assert meter.per_job[WORKERS] == 0
    assert meter.per_job[CLIENT] == pytest.approx(0.3e6, abs=TICK_S * 1e6)
