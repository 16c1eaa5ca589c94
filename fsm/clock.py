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
