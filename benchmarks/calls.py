"""Wall-clock and CPU time of one engine call, split per job: where a claim's time goes.

A claim loop that spends 120 us of wall-clock time per job in `Engine.claim` while
its thread burns 45 us of CPU there is waiting, for the database and for the cores
it shares with it, not computing: its rate is bound by that wait, and cheaper Python
would move it little. `Timed` wraps one method of one engine instance (never the
class, so nothing else in the process is measured) and adds up, over the calls made
after its last `reset`, the wall-clock time, the calling thread's CPU time
(`time.thread_time`: user + system of that thread alone), the calls and the jobs
they returned. Its clocks can be given (a test drives them by hand).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class Timed:
    """`Timed(engine, "claim")` replaces `engine.claim` on that instance with a timed call."""

    def __init__(
        self,
        engine: Any,
        name: str,
        *,
        wall: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.name = name
        self._wall, self._cpu = wall, cpu
        self._call = getattr(engine, name)
        setattr(engine, name, self)
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.jobs = 0
        self.wall = 0.0
        self.cpu = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        began, cpu = self._wall(), self._cpu()
        try:
            out = self._call(*args, **kwargs)
        finally:
            self.wall += self._wall() - began
            self.cpu += self._cpu() - cpu
            self.calls += 1
        self.jobs += len(out)
        return out

    def per_job(self, jobs: int | None = None) -> tuple[float, float]:
        """(wall, CPU) in microseconds per job, over `jobs` (default: the jobs returned)."""
        n = max(1, self.jobs if jobs is None else jobs)
        return self.wall / n * 1e6, self.cpu / n * 1e6

    def line(self) -> str:
        """One line for a report: calls, jobs per call, wall and CPU per job, the wait."""
        wall, cpu = self.per_job()
        size = self.jobs / self.calls if self.calls else 0.0
        return (
            f"Engine.{self.name}: {self.calls:,} calls of {size:.1f} jobs; {wall:.1f} us/job "
            f"wall-clock, {cpu:.1f} us/job CPU of the calling thread, "
            f"{wall - cpu:.1f} us/job waiting ({(wall - cpu) / wall if wall else 0:.0%})"
        )
