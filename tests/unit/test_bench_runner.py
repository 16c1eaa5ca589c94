"""benchmarks.runner: the one runner of worker processes and of the timed drain.

The drain's bookkeeping is checked with a scripted system and scripted CPU readings;
`Workers` with real child processes (started, logged, measured and stopped), never
with a bound on how fast any of that goes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import runner
from benchmarks.harness import REPO, wait_for
from benchmarks.machine import Meter


class ScriptedWorkers:
    """`Workers` as `drain` sees it: CPU seconds of two worker groups, moved by hand."""

    def __init__(self) -> None:
        self.cpu = [0.0, 0.0]

    def cpu_by_process(self) -> list[float]:
        return list(self.cpu)

    def cpu_seconds(self) -> float:
        return sum(self.cpu)


class ScriptedSystem:
    """A system whose jobs take scripted CPU and report two ends, recording the calls."""

    def __init__(self, workers: ScriptedWorkers, ends: tuple[float, ...]) -> None:
        self.workers = workers
        self.ends = ends
        self.calls: list[str] = []

    def enqueue(self, n: int) -> None:
        self.calls.append(f"enqueue {n}")

    def finish(
        self, n: int, started: float, at_end: Callable[[], None], limit: float
    ) -> tuple[float, ...]:
        self.workers.cpu = [
            c + n * 0.001 * share for c, share in zip(self.workers.cpu, (1, 3), strict=True)
        ]
        self.calls.append(f"finish {n}")
        at_end()
        self.calls.append("after at_end")
        return self.ends


def test_a_drain_warms_up_first_and_counts_only_the_timed_jobs() -> None:
    # given two workers whose jobs cost 1 ms and 3 ms of CPU each, and a system that
    # reports its jobs done 2 s and 2.5 s after the first enqueue
    workers = ScriptedWorkers()
    system = ScriptedSystem(workers, ends=(2.0, 2.5))
    # when 500 jobs are drained after a warm-up of 64
    got = runner.drain(workers, system, 64, 500)  # type: ignore[arg-type]
    # then the warm-up ran and finished before the timed jobs were enqueued
    assert system.calls[:3] == ["enqueue 64", "finish 64", "after at_end"]
    assert system.calls[3:5] == ["enqueue 500", "finish 500"]
    # and the figures are the timed jobs' alone: rates to each end, CPU per job
    assert got.jobs == 500
    assert got.rates == [250.0, 200.0]
    assert got.cpu_us_by_process == pytest.approx([1000.0, 3000.0])
    assert got.cpu_us == pytest.approx(4000.0)


def test_a_metered_drain_stops_the_meter_where_the_system_says_done_first() -> None:
    # given a meter over scripted readings
    readings = iter(
        [
            {"workers": 0.0, "busy": 0.0, "idle": 0.0},
            {"workers": 2.0, "busy": 2.0, "idle": 0.0},
        ]
    )
    meter = Meter(lambda _workers: next(readings), cores=2)
    workers = ScriptedWorkers()
    # when a drain of 1,000 jobs runs with it
    runner.drain(workers, ScriptedSystem(workers, ends=(1.0,)), 10, 1000, meter)  # type: ignore[arg-type]
    # then the meter spanned the timed jobs only, per job
    assert meter.per_job["workers"] == pytest.approx(2000.0)
    assert meter.total == pytest.approx(2000.0)


def test_a_counted_system_is_done_when_its_count_reaches_every_job_enqueued(
    tmp_path: Path,
) -> None:
    # given a store that counts what was submitted as done at once
    store: list[int] = []
    ended: list[str] = []
    system = runner.Counted(store.append, lambda: sum(store), runner.Workers(tmp_path))
    # when a warm-up and then 30 jobs are enqueued and finished
    system.enqueue(5)
    system.finish(5, 0.0, lambda: ended.append("warm"), 10.0)
    system.enqueue(30)
    (seconds,) = system.finish(30, 0.0, lambda: ended.append("timed"), 10.0)
    # then it waited for all 35, said when, and counted from `started`
    assert system.expected == 35
    assert ended == ["warm", "timed"]
    assert seconds > 0


def test_a_counted_system_that_never_gets_there_times_out_naming_the_jobs(
    tmp_path: Path,
) -> None:
    system = runner.Counted(lambda n: None, lambda: 0, runner.Workers(tmp_path))
    system.enqueue(3)
    with pytest.raises(TimeoutError, match="3 jobs done"):
        system.finish(3, 0.0, lambda: None, 0.05)


def test_a_jobfsm_worker_command_names_each_option_as_the_cli_spells_it(tmp_path: Path) -> None:
    argv = runner.jobfsm_worker(
        "benchmarks.noop:handlers", "sqlite:///x.db", queues=("a", "b"), concurrency=4,
        poll_interval=0.05, ready_file=tmp_path / "ready",
    )  # fmt: skip
    assert argv == [
        "fsm.cli", "worker", "--app", "benchmarks.noop:handlers", "--store", "sqlite:///x.db",
        "--queues", "a,b", "--concurrency", "4", "--poll-interval", "0.05",
        "--ready-file", str(tmp_path / "ready"),
    ]  # fmt: skip


def test_run_names_and_drain_bounds() -> None:
    assert runner.run_name("celery").startswith("bench_celery_")
    assert runner.run_name("celery") != runner.run_name("celery")
    assert runner.drain_timeout(2000) == 160.0


# --- real processes -------------------------------------------------------------------

CHILD = """
import os, signal, sys, time
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FORK") and os.fork() == 0:  # a child in the same process group
    open(os.environ["FORK"] + ".part", "w").write(str(os.getpid()))
    os.rename(os.environ["FORK"] + ".part", os.environ["FORK"])  # whole when it appears
    while True:
        time.sleep(0.05)
print("up", os.environ.get("GREETING"), "PYTHONPATH" in os.environ, flush=True)
open(os.environ["READY"], "w").close()
while True:
    time.sleep(0.05)
"""


def workers_in(tmp_path: Path, grace: float) -> runner.Workers:
    (tmp_path / "bench_child.py").write_text(CHILD)
    path = os.pathsep.join([str(REPO), str(tmp_path)])
    return runner.Workers(tmp_path / "logs", {"PYTHONPATH": path, "GREETING": "hi"}, grace=grace)


def test_workers_run_in_their_own_group_log_apart_and_stop_with_their_forks(
    tmp_path: Path,
) -> None:
    # given a worker that forks a child, started through the runner
    fork_pid = tmp_path / "fork.pid"
    with workers_in(tmp_path, grace=5.0) as workers:
        proc = workers.start(
            "bench_child", env={"READY": str(tmp_path / "r1"), "FORK": str(fork_pid)}
        )
        workers.wait(lambda: (tmp_path / "r1").exists() and fork_pid.exists(), 60, "start")
        child = int(fork_pid.read_text())
        # then it leads a process group of its own, which its fork is in
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        assert os.getpgid(child) == proc.pid
        # and its output is in its own log, with the run's environment
        assert workers.log(proc).startswith("up hi True")
        assert len(workers.cpu_by_process()) == 1
        assert workers.cpu_seconds() >= 0
        workers.check()  # alive: no error
    # when the block is left, the worker and its fork are gone
    assert proc.poll() is not None
    assert workers.procs == []
    wait_for(lambda: dead(child), 30, "the fork's end")


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init (its parent was killed with it) to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    workers = workers_in(tmp_path, grace=0.2)
    proc = workers.start("bench_child", env={"READY": str(tmp_path / "r"), "IGNORE_TERM": "1"})
    workers.wait((tmp_path / "r").exists, 60, "start")
    workers.stop()
    assert proc.returncode == -signal.SIGKILL


def test_a_frozen_worker_is_stopped_too(tmp_path: Path) -> None:
    workers = workers_in(tmp_path, grace=0)
    proc = workers.start("bench_child", env={"READY": str(tmp_path / "r")})
    workers.wait((tmp_path / "r").exists, 60, "start")
    os.killpg(proc.pid, signal.SIGSTOP)
    workers.stop()
    assert proc.returncode == -signal.SIGKILL


def test_a_worker_that_exits_early_fails_the_wait_with_its_log(tmp_path: Path) -> None:
    workers = workers_in(tmp_path, grace=0)
    workers.start("bench_child_missing", env={"READY": str(tmp_path / "r")})
    with pytest.raises(RuntimeError, match="No module named bench_child_missing"):
        workers.wait((tmp_path / "r").exists, 60, "start")
    workers.stop()
