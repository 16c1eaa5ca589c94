"""The benchmark harness: measurements, tasks, the run configuration and machine facts.

Every suite (`throughput`, `recovery`, `scale`) exposes `plan(cfg) -> list[Task]`.
`python -m benchmarks` runs the tasks of every selected suite in order, behind one
progress bar, and collects what each task returns: a list of `Measurement`s, each
written as one JSON line and rendered into the Markdown report.

A measurement is named by a dotted `key` (for example `throughput.jobfsm.postgres.w4.process`);
`benchmarks/report.py` looks measurements up by key to print the ratios (jobfsm / peer,
jobfsm / raw) and the targets they are held to.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

AMQP_URL = os.environ.get("JOBFSM_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2F")


@dataclass(frozen=True)
class Config:
    """What a run measures and how much of it.

    `quick` is the CI smoke size: every suite and every system runs, on small
    numbers, so that the whole run stays under five minutes on two cores. Figures
    from a quick run are not fit to quote.
    """

    quick: bool
    jobs: int  # no-op jobs per throughput run
    repeats: int  # runs per throughput figure (median, min-max)
    recovery_runs: int  # kill -9 runs per recovery scenario
    recovery_wait: float  # seconds to wait for a killed job to run again before "never"
    scale_rows: tuple[int, ...]  # finished rows for the scale suite
    memory_jobs: int  # jobs run by one worker for the memory figure
    tmp: Path  # scratch folder, removed after the run

    @classmethod
    def make(cls, *, quick: bool, tmp: Path, **overrides: Any) -> Config:
        if quick:
            base: dict[str, Any] = {
                "jobs": 300,
                "repeats": 1,
                "recovery_runs": 1,
                "recovery_wait": 8.0,
                "scale_rows": (0, 10_000),
                "memory_jobs": 3_000,
            }
        else:
            base = {
                "jobs": 5_000,
                "repeats": 3,
                "recovery_runs": 5,
                "recovery_wait": 120.0,
                "scale_rows": (0, 100_000, 1_000_000, 10_000_000),
                "memory_jobs": 100_000,
            }
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(quick=quick, tmp=tmp, **base)


@dataclass
class Measurement:
    """One figure: every repeat's value, plus what governs it.

    `settings` names the versions and the configuration that decide the behaviour
    (a peer's version and the setting its docs name); `facts` holds countable
    outcomes (ran twice, lost) that a reader checks beside the figure.
    """

    key: str
    label: str
    unit: str
    values: list[float]
    settings: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def low(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def high(self) -> float:
        return max(self.values) if self.values else float("nan")

    def to_json(self) -> str:
        data = asdict(self)
        data.update(median=self.median, min=self.low, max=self.high)
        return json.dumps(data, default=str)

    @classmethod
    def from_json(cls, line: str) -> Measurement:
        data = json.loads(line)
        for derived in ("median", "min", "max"):
            data.pop(derived, None)
        return cls(**data)


@dataclass(frozen=True)
class Task:
    """One step of a suite; `run` returns the measurements it took."""

    label: str
    run: Callable[[], list[Measurement]]


def repeat(times: int, one: Callable[[], float]) -> list[float]:
    return [one() for _ in range(times)]


def wait_for(check: Callable[[], object], timeout: float, what: str, step: float = 0.02) -> None:
    """Poll `check` until it is true; a bounded wait that names what it waited for."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if check():
            return
        time.sleep(step)
    raise TimeoutError(f"benchmark: {what} did not happen within {timeout:g}s")


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _command_output(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def machine_facts() -> dict[str, Any]:
    """Cores, CPU, memory, load and the versions of everything measured."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal"):
                mem_kib = int(line.split()[1])
                break
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kib / 2**20, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": __import__("sqlite3").sqlite_version,
        "postgresql": _command_output(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-tAc", "SHOW server_version"]
        ),
        "rabbitmq": _command_output(["rabbitmqctl", "version"]),
        "packages": {
            name: version_of(name)
            for name in (
                "jobfsm",
                "psycopg",
                "pika",
                "procrastinate",
                "dramatiq",
                "celery",
                "kombu",
            )
        },
    }


def write_jsonl(
    path: Path, facts: dict[str, Any], command: str, rows: Iterable[Measurement]
) -> None:
    """The raw results: a header line with the machine facts, then one line per figure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        out.write(json.dumps({"machine": facts, "command": command}, sort_keys=True) + "\n")
        for row in rows:
            out.write(row.to_json() + "\n")


def read_jsonl(path: Path) -> tuple[dict[str, Any], str, list[Measurement]]:
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    return head["machine"], head["command"], [Measurement.from_json(line) for line in lines[1:]]
