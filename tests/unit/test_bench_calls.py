"""benchmarks.calls.Timed: one engine instance's calls, wall-clock against thread CPU.

The clocks are driven by hand: what is checked is the bookkeeping, not how long a
call takes on this machine.
"""

from __future__ import annotations

import pytest

from benchmarks.calls import Timed


class Clocks:
    """A wall clock and a CPU clock that move only when told."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0


class Engine:
    """An engine stand-in whose claim moves the clocks by `wait` + `burn` of wall-clock
    time and `burn` of CPU."""

    def __init__(self, clocks: Clocks, wait: float, burn: float) -> None:
        self.clocks, self.wait, self.burn = clocks, wait, burn

    def claim(self, n: int) -> list[int]:
        self.clocks.wall += self.wait + self.burn
        self.clocks.cpu += self.burn
        return list(range(n))


def timed(engine: Engine) -> Timed:
    c = engine.clocks
    return Timed(engine, "claim", wall=lambda: c.wall, cpu=lambda: c.cpu)


def test_a_timed_call_splits_waiting_from_the_cpu_of_its_thread() -> None:
    # given an engine whose claim waits 50 ms and then computes for 30 ms
    engine = Engine(Clocks(), wait=0.05, burn=0.03)
    claims = timed(engine)
    # when it claims 10 jobs twice
    assert engine.claim(10) == list(range(10))
    engine.claim(10)
    # then the calls, the jobs, and wall-clock against CPU are counted apart
    assert (claims.calls, claims.jobs) == (2, 20)
    assert claims.cpu == pytest.approx(0.06)
    assert claims.wall == pytest.approx(0.16)
    assert claims.per_job() == pytest.approx((8000.0, 3000.0))  # us per job
    assert claims.line() == (
        "Engine.claim: 2 calls of 10.0 jobs; 8000.0 us/job wall-clock, 3000.0 us/job CPU "
        "of the calling thread, 5000.0 us/job waiting (62%)"
    )


def test_timing_one_engine_leaves_other_instances_and_reset_starts_over() -> None:
    # given two engines, one of them timed, with calls made before a reset
    clocks = Clocks()
    timed_one, other = Engine(clocks, 0.01, 0.01), Engine(clocks, 0.01, 0.01)
    claims = timed(timed_one)
    timed_one.claim(3)
    claims.reset()
    # when both claim
    timed_one.claim(5)
    other.claim(7)
    # then only the timed engine's call after the reset counts
    assert (claims.calls, claims.jobs) == (1, 5)
    assert not isinstance(other.__dict__.get("claim"), Timed)
    # and per_job can divide by the jobs of a whole drain instead
    assert claims.per_job(10) == pytest.approx((2000.0, 1000.0))


def test_a_call_that_raises_is_timed_and_counted_without_jobs() -> None:
    class Failing(Engine):
        def claim(self, n: int) -> list[int]:
            self.clocks.wall += 0.5
            raise RuntimeError("store down")

    engine = Failing(Clocks(), 0, 0)
    claims = timed(engine)
    with pytest.raises(RuntimeError, match="store down"):
        engine.claim(3)
    assert (claims.calls, claims.jobs, claims.wall) == (1, 0, 0.5)
    assert "0 calls" not in claims.line()
