"""The two crash scenarios, run the same way against every system.

kill: two workers are up and ready; a job is submitted; the process running it gets
`kill -9` `kill_after` seconds after the job started; the other worker (already started
and ready) is the fresh one. We time the re-run, wait for completion, then judge.

zombie: as above, but the worker running the job is frozen (SIGSTOP on its process
group) instead; once another worker has re-run the job and committed its effect, the
frozen one is woken (SIGCONT) and lets its handler finish and try its effect too.

Worker processes run through `runner.Workers` (each in a session of its own, so a
whole worker can be frozen). A system plugs in through `Session` (start a worker, say
if it is ready, submit the job, say where an unfinished job ended up once every
worker is gone).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.crash import marks
from benchmarks.harness import Config, Measurement, wait_for
from benchmarks.runner import Workers

STARTUP_S = 90.0  # bound on worker start-up (imports on a loaded 2-core machine)
FIRST_START_S = 30.0  # bound on the first start of a submitted job
COMPLETE_MARGIN_S = 30.0  # a re-run job must complete within its sleep plus this


@dataclass(frozen=True)
class Sizes:
    sleep: float  # the handler's work, seconds
    kill_after: float  # kill -9 / SIGSTOP this long after the job started
    runs: int
    bound: float  # "never re-run" after this many seconds

    @classmethod
    def of(cls, cfg: Config, *, bound: float | None = None) -> Sizes:
        return cls(
            sleep=3.0 if cfg.quick else 30.0,
            kill_after=1.0 if cfg.quick else 2.0,
            runs=cfg.recovery_runs,
            bound=bound if bound is not None else cfg.recovery_wait,
        )


class Session(Protocol):
    def start_worker(self, index: int) -> subprocess.Popen[bytes]: ...
    def ready(self, proc: subprocess.Popen[bytes]) -> bool: ...
    def submit(self, payload: dict[str, Any]) -> None: ...
    def fate(self) -> str:
        """Once every worker is gone, where the unfinished job is: "lost", "stuck" or "waiting"."""
        ...


#: a system: given the marks folder, the worker group and the sizes, a session for one run
System = Callable[[Path, Workers, Sizes], AbstractContextManager[Session]]


@dataclass
class Run:
    rerun_after: float | None = None  # seconds from kill -9 / SIGSTOP to the next start
    completions: int = 0
    effects: int = 0
    refused: int = 0  # completed runs whose fenced effect was refused (jobfsm only)
    fate: str = "completed"  # else the session's verdict: "lost", "stuck" or "waiting"


def _runs(
    system: System, sizes: Sizes, tmp: Path, one: Callable[[Path, Workers, Session], Run]
) -> list[Run]:
    out = []
    for _ in range(sizes.runs):
        folder = Path(tempfile.mkdtemp(prefix="crash-", dir=tmp))
        group = Workers(folder, grace=0)  # SIGCONT, then SIGKILL: a frozen worker dies too
        try:
            with system(folder, group, sizes) as session:
                try:
                    out.append(one(folder, group, session))
                finally:
                    group.stop()
        finally:
            group.stop()
    return out


def _start_two(group: Workers, session: Session) -> list[subprocess.Popen[bytes]]:
    workers = [session.start_worker(i) for i in range(2)]
    try:
        wait_for(lambda: all(session.ready(w) for w in workers), STARTUP_S, "two workers ready")
    except TimeoutError as err:
        tails = [group.log(w)[-1500:] for w in workers]
        raise TimeoutError(f"{err}; logs: {tails}") from None
    for w in workers:
        if w.poll() is not None:
            raise RuntimeError(f"a worker exited at start-up: {group.log(w)[-1500:]}")
    return workers


def _first_start(folder: Path, session: Session, sizes: Sizes, effect: bool) -> marks.Mark:
    session.submit({"marks": str(folder), "seconds": sizes.sleep, "effect": effect})
    wait_for(lambda: marks.read(folder, "start"), FIRST_START_S, "the job's first start")
    first = marks.read(folder, "start")[0]
    time.sleep(max(0.0, first.t + sizes.kill_after - time.time()))
    return first


def kill_run(folder: Path, group: Workers, session: Session, sizes: Sizes) -> Run:
    _start_two(group, session)
    first = _first_start(folder, session, sizes, effect=False)
    killed = time.time()
    os.kill(first.pid, signal.SIGKILL)
    run = Run()
    try:
        wait_for(
            lambda: len(marks.read(folder, "start")) >= 2, sizes.bound, "the re-run", step=0.01
        )
    except TimeoutError:
        pass
    else:
        run.rerun_after = marks.read(folder, "start")[1].t - killed
        until = sizes.sleep + COMPLETE_MARGIN_S
        with suppress(TimeoutError):
            wait_for(lambda: marks.read(folder, "done"), until, "the re-run to complete", step=0.05)
        time.sleep(0.5)  # let a second completion, if any, land before counting
    run.completions = len(marks.read(folder, "done"))
    group.stop()
    if not run.completions:
        run.fate = session.fate()
    return run


def zombie_run(folder: Path, group: Workers, session: Session, sizes: Sizes) -> Run:
    _start_two(group, session)
    first = _first_start(folder, session, sizes, effect=True)
    frozen = os.getpgid(first.pid)  # the worker's whole group: its session leader's
    stopped = time.time()
    os.killpg(frozen, signal.SIGSTOP)
    run = Run()
    try:
        wait_for(
            lambda: len(marks.read(folder, "start")) >= 2, sizes.bound, "the takeover", step=0.02
        )
        run.rerun_after = marks.read(folder, "start")[1].t - stopped
        with suppress(TimeoutError):
            wait_for(
                lambda: [m for m in marks.read(folder, "done") if m.pid != first.pid],
                sizes.sleep + COMPLETE_MARGIN_S,
                "the takeover to complete",
                step=0.05,
            )
    except TimeoutError:
        pass
    finally:
        os.killpg(frozen, signal.SIGCONT)
    # the woken zombie finishes its (long overdue) sleep and tries its effect
    with suppress(TimeoutError):
        wait_for(
            lambda: [m for m in marks.read(folder, "done") if m.pid == first.pid],
            15.0,
            "the zombie",
        )
    time.sleep(1.0)
    run.completions = len(marks.read(folder, "done"))
    run.effects = len(marks.read(folder, "effect"))
    run.refused = sum(1 for m in marks.read(folder, "done") if m.info.get("committed") is False)
    group.stop()
    if not run.completions:
        run.fate = session.fate()
    return run


def measure(
    key: str,
    *,
    zombie: bool,
    label: str,
    system: System,
    sizes: Sizes,
    tmp: Path,
    settings: dict[str, Any],
    note: str,
) -> Measurement:
    """Kill runs: seconds until the re-run. Zombie runs: runs whose effect landed twice."""
    scenario = zombie_run if zombie else kill_run
    runs = _runs(system, sizes, tmp, lambda f, g, s: scenario(f, g, s, sizes))
    if zombie:
        unit, values = "effects", [float(sum(1 for r in runs if r.effects > 1))]
    else:
        unit, values = "s", [round(r.rerun_after, 3) for r in runs if r.rerun_after is not None]
    return Measurement(
        key=key,
        label=label,
        unit=unit,
        values=values,
        settings=settings,
        facts=_facts(runs, sizes, zombie=zombie),
        note=note,
    )


measure_kill = functools.partial(measure, zombie=False)
measure_zombie = functools.partial(measure, zombie=True)


def _facts(runs: list[Run], sizes: Sizes, *, zombie: bool) -> dict[str, Any]:
    rerun = sum(1 for r in runs if r.rerun_after is not None)
    facts: dict[str, Any] = {
        "runs": len(runs),
        "rerun": rerun,
        "not_rerun_within_s": sizes.bound,
        "never_rerun": len(runs) - rerun,
        "ran_twice": sum(1 for r in runs if r.completions > 1),
        "lost": sum(1 for r in runs if r.fate == "lost"),
        "stuck": sum(1 for r in runs if r.fate == "stuck"),
    }
    if zombie:
        facts["effects_committed"] = sum(r.effects for r in runs)
        facts["stale_effects_refused"] = sum(r.refused for r in runs)
        facts["takeover_s"] = [round(r.rerun_after, 3) for r in runs if r.rerun_after is not None]
    return facts
