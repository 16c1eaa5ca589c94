"""benchmarks.calls.Timed: one engine instance's calls, wall-clock against thread CPU."""

from __future__ import annotations

import time

import pytest

from benchmarks.calls import Timed


class Engine:
    """An engine stand-in whose claim waits `wait` seconds, then burns `burn` of CPU."""

    def __init__(self, wait: float, burn: float) -> None:
        self.wait, self.burn = wait, burn

    def claim(self, n: int) -> list[int]:
        time.sleep(self.wait)
        until = time.thread_time() + self.burn
        while time.thread_time() < until:
            pass
        return list(range(n))


def test_a_timed_call_splits_waiting_from_the_cpu_of_its_thread() -> None:
    # given an engine whose claim sleeps 50 ms and then computes for 30 ms
    engine = Engine(wait=0.05, burn=0.03)
    timed = Timed(engine, "claim")
    # when it claims 10 jobs twice
    assert engine.claim(10) == list(range(10))
    engine.claim(10)
    # then the calls, the jobs, and wall-clock against CPU are counted apart
    assert (timed.calls, timed.jobs) == (2, 20)
    assert timed.cpu == pytest.approx(0.06, abs=0.02)
    assert timed.wall == pytest.approx(0.16, abs=0.05)
    wall, cpu = timed.per_job()
    assert wall > cpu > 0
    assert wall == pytest.approx(timed.wall / 20 * 1e6)
    assert "2 calls of 10.0 jobs" in timed.line()


def test_timing_one_engine_leaves_other_instances_and_reset_starts_over() -> None:
    # given two engines, one of them timed, with calls made before a reset
    timed_one, other = Engine(wait=0.0, burn=0.0), Engine(wait=0.0, burn=0.0)
    timed = Timed(timed_one, "claim")
    timed_one.claim(3)
    timed.reset()
    # when both claim
    timed_one.claim(5)
    other.claim(7)
    # then only the timed engine's call after the reset counts
    assert (timed.calls, timed.jobs) == (1, 5)
    assert not isinstance(other.__dict__.get("claim"), Timed)
    # and per_job can divide by the jobs of a whole drain instead
    assert timed.per_job(10)[0] == pytest.approx(timed.wall / 10 * 1e6)
