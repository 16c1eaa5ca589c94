"""The one runner of worker processes and timed drains, for jobfsm's rows and the peers' alike.

Every benchmark that starts workers starts them here, as `python -m <module> ...`
subprocesses (`Workers`): each in a session of its own, so a worker and every child
it forks are one process group, measured together (CPU from /proc, reaped forks
included), frozen together (the crash suite's SIGSTOP) and stopped together, always:
`Workers` is a context manager, and leaving it sends SIGCONT, SIGTERM and, after its
`grace`, SIGKILL to every group it started. Each process logs to its own file in the
run's folder; a worker that exits early, or a wait that times out, raises with the
tails of those logs.

`drain` is the one timed window of every throughput row: a warm-up of one job per
slot drained first, then the clock from the first enqueue until the system's own
record says every job is done, the workers' CPU read on both sides. A system plugs
in with `enqueue(n)` and `finish(n, started, at_end, limit)` (`Counted` is the
shape of every system whose store counts the jobs done).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

from benchmarks.harness import REPO, wait_for
from benchmarks.machine import CLOCK_TICKS, Meter, stat_fields

START_TIMEOUT = 90.0  # seconds for worker processes to come up (and warm up) under load


def run_name(system: str) -> str:
    """A name no other run uses (a queue, a log folder): `bench_<system>_<random>`."""
    return f"bench_{system}_{uuid.uuid4().hex[:10]}"


def drain_timeout(jobs: int) -> float:
    """How long `jobs` no-op jobs may take before the benchmark gives up (>= 20 jobs/s)."""
    return 60.0 + jobs / 20


def group_cpu_seconds(groups: set[int]) -> float:
    """User + system CPU seconds of every live process in the process groups `groups`,
    and of the children they reaped (a pool's forks), from /proc."""
    return sum(_groups_cpu(groups).values())


def _groups_cpu(groups: set[int]) -> dict[int, float]:
    ticks = dict.fromkeys(groups, 0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(entry.name)
        except OSError:  # gone meanwhile
            continue
        group = int(fields[2])  # pgrp
        if group in ticks:
            ticks[group] += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return {group: n / CLOCK_TICKS for group, n in ticks.items()}


def jobfsm_worker(app: str, store: str, **options: object) -> list[str]:
    """The arguments of `python -m fsm.cli worker --app APP --store STORE`, each option
    as `--name value` (underscores as dashes; a list or tuple value comma-joined)."""
    argv = ["fsm.cli", "worker", "--app", app, "--store", store]
    for name, value in options.items():
        shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        argv += [f"--{name.replace('_', '-')}", shown]
    return argv


class Workers:
    """Worker processes of one run, each `python -m ARGV` in a process group of its own."""

    def __init__(
        self, folder: Path, env: Mapping[str, str | None] | None = None, *, grace: float = 5.0
    ) -> None:
        self.folder = folder
        self.env = dict(env or {})
        self.grace = grace  # seconds between SIGTERM and SIGKILL on stop (0: SIGKILL at once)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}
        self.started = 0

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(
        self, *argv: str, env: Mapping[str, str | None] | None = None, name: str = "worker"
    ) -> subprocess.Popen[bytes]:
        """Start `python -m ARGV` with the run's environment (and `env`: a None value
        removes a variable), PYTHONPATH led by the repository, its output to a log file."""
        full = dict(os.environ)
        full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full.get("PYTHONPATH")) if p)
        for key, value in {**self.env, **(env or {})}.items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        self.folder.mkdir(parents=True, exist_ok=True)
        self.started += 1
        log = self.folder / f"{name}-{self.started}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=REPO,
                env=full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killpg reaches its forks
            )
        self.procs.append(proc)
        self.logs[proc.pid] = log
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return self.logs[proc.pid].read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        """The last `lines` of every log of this run."""
        out = []
        for pid, path in self.logs.items():
            try:
                text = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            except OSError:
                text = "(no log)"
            out.append(f"--- worker {pid} ({path.name}):\n{text}")
        return "\n".join(out)

    def check(self) -> None:
        """Raise, with the logs' tails, if a worker process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"benchmark: worker {proc.args!r} exited with {proc.returncode}:\n{self.tail()}"
                )

    def wait(
        self, done: Callable[[], object], timeout: float, what: str, step: float = 0.02
    ) -> None:
        """`wait_for(done)`, raising at once if a worker exits; a timeout shows the logs."""

        def checked() -> object:
            self.check()
            return done()

        try:
            wait_for(checked, timeout, what, step)
        except TimeoutError as err:
            raise TimeoutError(f"{err}\n{self.tail()}") from None

    def cpu_by_process(self) -> list[float]:
        """CPU seconds so far of each started process's group (it and its forks)."""
        spent = _groups_cpu({proc.pid for proc in self.procs})
        return [spent[proc.pid] for proc in self.procs]

    def cpu_seconds(self) -> float:
        return sum(self.cpu_by_process())

    def stop(self) -> None:
        """SIGCONT (a frozen one must die too), then SIGTERM, then after `grace` seconds
        SIGKILL, to each process group started; reap them."""
        steps = [(signal.SIGTERM, self.grace)] if self.grace > 0 else []
        for sig, grace in [(signal.SIGCONT, 0.0), *steps, (signal.SIGKILL, 10.0)]:
            for proc in self.procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)  # pgid == pid: start_new_session
            if sig == signal.SIGCONT:
                continue
            until = time.monotonic() + grace
            for proc in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, until - time.monotonic()))
            if all(_group_gone(proc.pid) for proc in self.procs):
                break
        self.procs = []


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# --- the timed window ----------------------------------------------------------------


class System(Protocol):
    """A system under test, its workers started: how to enqueue jobs and see them done."""

    def enqueue(self, n: int) -> None: ...

    def finish(
        self, n: int, started: float, at_end: Callable[[], None], limit: float
    ) -> tuple[float, ...]:
        """Wait until the `n` jobs last enqueued are done; call `at_end` at the first
        moment that counts as done; return the seconds from `started` to each end the
        system reports (one, or for a RabbitMQ peer two: see `broker.wait_drained`)."""
        ...


class Counted:
    """A system whose own record counts the jobs done: done once the count reaches
    every job enqueued so far (warm-up included)."""

    def __init__(
        self,
        submit: Callable[[int], object],
        done: Callable[[], int],
        workers: Workers,
        step: float = 0.02,
    ) -> None:
        self.submit = submit
        self.done = done
        self.workers = workers
        self.step = step
        self.expected = 0

    def enqueue(self, n: int) -> None:
        self.submit(n)
        self.expected += n

    def finish(
        self, n: int, started: float, at_end: Callable[[], None], limit: float
    ) -> tuple[float, ...]:
        self.workers.wait(lambda: self.done() >= self.expected, limit, f"{n} jobs done", self.step)
        elapsed = time.perf_counter() - started
        at_end()
        return (elapsed,)


@dataclass(frozen=True)
class Drained:
    """One timed drain: its jobs, the seconds to each end, each worker group's CPU seconds."""

    jobs: int
    seconds: tuple[float, ...]
    cpu: tuple[float, ...]

    @property
    def rates(self) -> list[float]:
        """Jobs/s to each end the system reported (the first is the figure)."""
        return [self.jobs / s for s in self.seconds]

    @property
    def cpu_us(self) -> float:
        """Worker CPU microseconds per job, every worker process together."""
        return sum(self.cpu) / self.jobs * 1e6

    @property
    def cpu_us_by_process(self) -> list[float]:
        return [c / self.jobs * 1e6 for c in self.cpu]


def cpu_spent(before: Sequence[float], after: Sequence[float]) -> tuple[float, ...]:
    return tuple(b - a for a, b in zip(before, after, strict=True))


def drain(
    workers: Workers, system: System, warm: int, jobs: int, meter: Meter | None = None
) -> Drained:
    """Warm up with `warm` jobs (one per slot, drained before the clock starts), then
    time `jobs` from the first enqueue until done; `meter` also splits the whole
    machine's CPU over that window (it stops where the system says done first)."""
    system.enqueue(warm)
    system.finish(warm, time.perf_counter(), lambda: None, START_TIMEOUT)
    if meter is not None:
        meter.start(workers.cpu_seconds)
    before = workers.cpu_by_process()
    started = time.perf_counter()
    system.enqueue(jobs)
    at_end = (lambda: None) if meter is None else (lambda: meter.stop(jobs))
    ends = system.finish(jobs, started, at_end, drain_timeout(jobs))
    return Drained(jobs, ends, cpu_spent(before, workers.cpu_by_process()))
