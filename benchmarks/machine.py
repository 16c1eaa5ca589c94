"""Where a job's CPU goes on the whole machine, read from /proc.

A throughput row's worker CPU per job says what one system's workers spent. On a
machine whose database, broker, client and workers share the same cores, the rate
is bounded by what all of them spend together: `Meter` splits the CPU of the timed
window into the worker processes, the PostgreSQL server, the RabbitMQ server, this
benchmark process (the client that enqueues, and waits) and the rest of the machine,
and says how busy the cores were. The servers' figures count every client they
served meanwhile, so the machine should be otherwise idle.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # units of the CPU times in /proc
CORES = os.cpu_count() or 1

#: the command names (/proc/<pid>/comm) of the servers' processes
SERVERS = {"postgres": "PostgreSQL server", "beam.smp": "RabbitMQ server"}
#: a command name other programs share, and what a server's command line holds: every
#: rabbitmqctl runs its own Erlang VM, also named beam.smp (a test that changes a broker
#: setting beside a benchmark started one, and its CPU, lost when it ended, made the
#: server's share negative); the broker boots with `-s rabbit boot`. A mark is matched
#: against the arguments joined by spaces (/proc/<pid>/cmdline separates them by NULs)
MARKS = {"beam.smp": b"rabbit boot"}
WORKERS = "worker processes"
CLIENT = "this benchmark process (enqueue, wait)"
OTHER = "rest of the machine (kernel, other processes)"


def stat_fields(pid: int | str = "self") -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: state is [0], ppid [1],
    pgrp [2], utime [11], stime [12], cutime [13], cstime [14]."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def process_cpu(pid: int | str = "self", reaped: bool = False) -> float:
    """User + system CPU seconds of process `pid` and all its threads; with `reaped`,
    also what its children that ended and were waited for spent (cutime, cstime)."""
    fields = stat_fields(pid)
    own = int(fields[11]) + int(fields[12])  # utime, stime
    children = int(fields[13]) + int(fields[14]) if reaped else 0  # cutime, cstime
    return (own + children) / CLOCK_TICKS


def servers_cpu(
    names: dict[str, str] = SERVERS, marks: dict[str, bytes] = MARKS
) -> dict[str, float]:
    """CPU seconds so far of every server process here, by server (`names` maps a
    command name to its server; a process of a command in `marks` counts only if its
    command line holds the mark).

    PostgreSQL starts a process per connection and the postmaster reaps it when the
    connection ends: a live process counts its own CPU, and a server process also what
    its reaped children spent, so a connection that ended stays counted (summing the
    live processes alone lost its whole CPU, and a window could read less at its end
    than at its start). A scan of /proc is not atomic: a process reaped between the
    reads of its parent and of itself is missed by that one reading, which errs by at
    most that process's CPU."""
    out = dict.fromkeys(names.values(), 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            name = names.get(comm)
            if name is None:
                continue
            if comm in marks and marks[comm] not in command_line(entry):
                continue
            out[name] += process_cpu(entry.name, reaped=True)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return out


def command_line(entry: Path) -> bytes:
    """A process's arguments joined by spaces."""
    return (entry / "cmdline").read_bytes().replace(b"\0", b" ")


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds so far of all cores together, from /proc/stat;
    time waiting for I/O counts as idle."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    busy = sum(ticks[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / CLOCK_TICKS, idle / CLOCK_TICKS


def read_machine(workers: Callable[[], float]) -> dict[str, float]:
    """CPU seconds so far of each part: the worker processes (`workers()`), the
    servers, this process, and the machine's busy and idle time."""
    busy, idle = machine_cpu()
    return {
        WORKERS: workers(),
        **servers_cpu(),
        CLIENT: process_cpu(),
        "busy": busy,
        "idle": idle,
    }


class Meter:
    """The machine's CPU over one timed window, per component, per job.

    `start(workers)` where `workers()` gives the worker processes' CPU seconds so far;
    `stop(jobs)` ends the window. Then `per_job` maps each component to microseconds
    per job, `busy` is the share of all cores in use, and `ceiling` the jobs/s the
    machine could reach if every core were busy at this cost per job. `read` takes
    the readings (`read_machine`; a test gives its own), `cores` the cores counted.
    """

    def __init__(
        self,
        read: Callable[[Callable[[], float]], dict[str, float]] = read_machine,
        cores: int = CORES,
    ) -> None:
        self.per_job: dict[str, float] = {}
        self.busy = 0.0
        self.ceiling = 0.0
        self._read = read
        self._cores = cores
        self._workers: Callable[[], float] = lambda: 0.0
        self._start: dict[str, float] = {}

    def start(self, workers: Callable[[], float]) -> None:
        self._workers = workers
        self._start = self._read(workers)

    def stop(self, jobs: int) -> None:
        spent = {k: v - self._start[k] for k, v in self._read(self._workers).items()}
        busy, idle = spent.pop("busy"), spent.pop("idle")
        spent[OTHER] = max(0.0, busy - sum(spent.values()))
        self.per_job = {k: v / jobs * 1e6 for k, v in spent.items()}
        self.busy = min(1.0, busy / (busy + idle)) if busy + idle > 0 else 0.0
        total = sum(self.per_job.values())
        self.ceiling = self._cores * 1e6 / total if total > 0 else 0.0

    @property
    def total(self) -> float:
        """Machine CPU microseconds per job, every component together."""
        return sum(self.per_job.values())


#: the fact a throughput row keeps of its machine's CPU (the best shape's repeats)
MACHINE_FACT = "machine CPU per job, us, by part (medians of the repeats, from /proc)"


def machine_fact(meters: Sequence[Meter]) -> dict[str, dict[str, Any]]:
    """A row's fact: each part's median microseconds per job, all of them, and the
    median share of the cores in use."""
    if not meters:
        return {}
    fact: dict[str, Any] = {
        part: round(statistics.median(m.per_job[part] for m in meters), 1)
        for part in meters[0].per_job
    }
    fact["all"] = round(statistics.median(m.total for m in meters), 1)
    fact["cores busy"] = f"{statistics.median(m.busy for m in meters):.0%}"
    return {MACHINE_FACT: fact}
