"""Clocks: injected everywhere so every test can run on fake time."""

from __future__ import annotations

import threading
import time


class SystemClock:
    """Wall-clock seconds since the epoch (shared across hosts, unlike monotonic time)."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


class FakeClock:
    """A clock that moves only when told to; `sleep` advances it."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a fake clock does not go backwards")
        with self._lock:
            self._now += seconds
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))


class ScaledClock:
    """Wall-clock time running `factor` times faster from `start` (default: now), for
    tests that need many minutes of schedule ticks in seconds; `sleep` sleeps the
    scaled-down real time. Share one instance so every component agrees on the time."""

    def __init__(self, factor: float, start: float | None = None) -> None:
        if not factor > 0:
            raise ValueError(f"a scaled clock needs a positive factor, got {factor!r}")
        self.factor = factor
        self._real0 = time.time()
        self._start = self._real0 if start is None else start

    def now(self) -> float:
        return self._start + (time.time() - self._real0) * self.factor

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0) / self.factor)
