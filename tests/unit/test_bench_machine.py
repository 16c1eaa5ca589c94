"""benchmarks.machine: the whole machine's CPU over a window, split per component.

The arithmetic is checked on scripted readings; one run on this machine's /proc
checks that the parts are read and that the figures follow from them, never what
share any part gets (that moves with whatever else the machine is doing).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from benchmarks.machine import (
    CLIENT,
    CLOCK_TICKS,
    CORES,
    MACHINE_FACT,
    OTHER,
    SERVERS,
    WORKERS,
    Meter,
    machine_fact,
    process_cpu,
    servers_cpu,
)

PG, RABBIT = SERVERS["postgres"], SERVERS["beam.smp"]


def scripted(*readings: dict[str, float]) -> Callable[[Callable[[], float]], dict[str, float]]:
    """A reader that hands out `readings` in turn (CPU seconds so far of each part)."""
    left = list(readings)
    return lambda _workers: left.pop(0)


def reading(*seconds: float) -> dict[str, float]:
    """CPU seconds so far of the workers, PostgreSQL, RabbitMQ, this process, and the
    machine's busy and idle time."""
    return dict(zip((WORKERS, PG, RABBIT, CLIENT, "busy", "idle"), seconds, strict=True))


def test_each_part_is_its_cpu_over_the_window_per_job_and_the_rest_is_the_unnamed_busy_time() -> (
    None
):
    # given a window in which the workers spent 2 s, PostgreSQL 1 s, RabbitMQ 0.5 s,
    # this process 0.25 s, and the cores were busy 4 s and idle 4 s in all
    meter = Meter(
        scripted(reading(10, 20, 30, 40, 100, 50), reading(12, 21, 30.5, 40.25, 104, 54)),
        cores=2,
    )
    meter.start(lambda: 0.0)
    # when it stops after 1,000 jobs
    meter.stop(jobs=1000)
    # then each part is microseconds per job, and the rest is what no part accounts for
    assert meter.per_job == pytest.approx(
        {WORKERS: 2000, PG: 1000, RABBIT: 500, CLIENT: 250, OTHER: 250}
    )
    assert meter.total == pytest.approx(4000)  # the busy time per job: parts add up to it
    assert meter.busy == pytest.approx(0.5)
    assert meter.ceiling == pytest.approx(2 * 1e6 / 4000)  # 2 cores at 4 ms per job


def test_parts_that_overshoot_the_busy_time_leave_no_negative_rest() -> None:
    # given readings in which the named parts add up to more than the machine's busy
    # time (each part's /proc ticks are sampled apart)
    meter = Meter(scripted(reading(0, 0, 0, 0, 0, 0), reading(1, 0.5, 0, 0, 1.2, 0.8)), cores=2)
    meter.start(lambda: 0.0)
    meter.stop(jobs=10)
    # then the rest is zero, never negative, and the total is the parts' sum
    assert meter.per_job[OTHER] == 0
    assert meter.total == pytest.approx(150_000)
    assert meter.busy == pytest.approx(0.6)


def test_an_idle_window_has_no_ceiling_and_no_busy_share() -> None:
    meter = Meter(scripted(reading(1, 1, 1, 1, 5, 5), reading(1, 1, 1, 1, 5, 5)), cores=2)
    meter.start(lambda: 0.0)
    meter.stop(jobs=1)
    assert meter.total == 0
    assert (meter.busy, meter.ceiling) == (0.0, 0.0)


def test_the_workers_reading_is_the_callable_given_at_start() -> None:
    # given a meter reading the real parts but a scripted worker count
    seen = iter([3.0, 5.0])
    meter = Meter()
    meter.start(lambda: next(seen))
    meter.stop(jobs=2)
    # then the workers' share is that callable's difference, per job
    assert meter.per_job[WORKERS] == pytest.approx(1e6)


def test_a_row_keeps_the_median_of_each_part_over_its_repeats() -> None:
    meters = []
    for workers, busy in ((1.0, 0.4), (3.0, 0.6), (2.0, 0.9)):
        m = Meter(scripted(reading(0, 0, 0, 0, 0, 0), reading(workers, 0, 0, 0, workers, 1)))
        m.start(lambda: 0.0)
        m.stop(jobs=1)
        m.busy = busy
        meters.append(m)
    fact = machine_fact(meters)[MACHINE_FACT]
    assert fact[WORKERS] == 2e6
    assert fact["all"] == 2e6
    assert fact["cores busy"] == "60%"
    assert machine_fact([]) == {}


def test_a_window_on_this_machine_reads_every_part_and_its_figures_follow_from_them() -> None:
    # given a window over some work of this process
    meter = Meter()
    meter.start(process_cpu)
    sum(i * i for i in range(200_000))
    meter.stop(jobs=4)
    # then every part was read, none is negative, and the derived figures follow
    parts = meter.per_job
    assert set(parts) == {WORKERS, *SERVERS.values(), CLIENT, OTHER}
    assert all(v >= 0 for v in parts.values())
    assert meter.total == pytest.approx(sum(parts.values()))
    assert 0 <= meter.busy <= 1
    if meter.total:
        assert meter.ceiling == pytest.approx(CORES * 1e6 / meter.total)


#: a "server" that starts short-lived children, each burning CPU, and reaps them (as
#: the postmaster does with its backends); it and its children carry the command name
#: given, so servers_cpu can tell them from every other process on the machine
FORKING_SERVER = """
import os, sys, time
with open("/proc/self/comm", "w") as comm:
    comm.write(sys.argv[1])
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        until = time.process_time() + 0.05
        while time.process_time() < until:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_a_servers_cpu_keeps_counting_its_ended_children() -> None:
    # given a server whose children end one after another, each after some CPU work
    comm = f"jf{uuid.uuid4().hex[:12]}"
    names = {comm: "server"}
    with subprocess.Popen(
        [sys.executable, "-c", FORKING_SERVER, comm, "20"], stdout=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready"
            # when its CPU is read again and again while the children come and go
            readings = [servers_cpu(names)["server"]]
            deadline = time.monotonic() + 30
            while server.poll() is None and time.monotonic() < deadline:
                readings.append(servers_cpu(names)["server"])
                time.sleep(0.005)
            assert server.wait(timeout=30) == 0
        finally:
            if server.poll() is None:
                server.kill()
    # then the readings grew by about what the 20 children spent (1 s of CPU in all:
    # an ended child's CPU stays counted), and no reading is below the one before it by
    # more than one child's CPU (a scan of /proc is not atomic: a child reaped between
    # the reads of its parent and of itself is missed by that one reading)
    assert readings[-1] - readings[0] >= 0.5
    one_child = 0.05 + 2 / CLOCK_TICKS
    assert all(b >= a - one_child for a, b in itertools.pairwise(readings)), readings


#: burns `sys.argv[2]` seconds of CPU under the command name `sys.argv[1]`, then waits
BURNER = """
import sys, time
with open("/proc/self/comm", "w") as comm:
    comm.write(sys.argv[1])
until = time.process_time() + float(sys.argv[2])
while time.process_time() < until:
    pass
print("ready", flush=True)
time.sleep(60)
"""


def test_a_servers_cpu_counts_only_the_processes_that_carry_the_servers_mark() -> None:
    # given a server and another program under the same command name (as rabbitmqctl
    # runs an Erlang VM named beam.smp beside the broker's), only the server's command
    # line holding the mark, in two arguments (as the broker's `-s rabbit boot`)
    comm = f"jf{uuid.uuid4().hex[:12]}"
    mark = ["mark", uuid.uuid4().hex[:8]]
    argv = [sys.executable, "-c", BURNER, comm]
    procs = [
        subprocess.Popen([*argv, seconds, *extra], stdout=subprocess.PIPE)
        for seconds, extra in (("0.1", mark), ("0.4", []))
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"ready"
        # when the servers' CPU is read
        server = servers_cpu({comm: "server"}, {comm: " ".join(mark).encode()})["server"]
        unmarked = servers_cpu({comm: "server"}, {})["server"]
        own = [process_cpu(proc.pid, reaped=True) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    # then the server's share is its own CPU, not the other program's; without the mark
    # both count
    tick = 2 / CLOCK_TICKS
    assert server == pytest.approx(own[0], abs=tick)
    assert unmarked == pytest.approx(own[0] + own[1], abs=2 * tick)
    assert own[1] > own[0] + 0.2
