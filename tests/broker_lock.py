"""Who may use the shared RabbitMQ broker at once, across every test process on this host.

Most RabbitMQ tests use names of their own (a `prefix` per test) and connections of
their own (a relay per test), so any number of them may run side by side. A few change
what every client of the broker meets: the consumer timeout and the channel tick are
broker-wide, and a channel opened while they are lowered keeps the lowered values. Such
a test is marked `broker_settings` and holds this lock exclusively; every other RabbitMQ
test holds it shared. The lock is a pair of `flock` files in the temporary folder, so it
also keeps apart the tests of two runs at once on one machine (the xdist workers of one
run are separate processes, and so are two runs).

A waiting exclusive holder goes first: shared holders pass a turnstile, which the
exclusive one keeps closed while it waits for the running shared holders to finish
(else a stream of shared holders on six workers could keep it waiting to the end of the
run). Every wait is bounded by `WAIT`; past it the test fails naming the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: the longest a test waits for the broker (seconds): the longest shared holder (the quick
#: benchmark run, about 100 s on an idle machine) several times over, under pytest-timeout's
#: 300 s so that the failure names the lock
WAIT = 240.0
#: how often a waiter tries again (seconds)
POLL = 0.05

#: where the two lock files live (one per host: every run's tests meet there)
FOLDER = Path(tempfile.gettempdir())

_exclusive = False


def exclusive_held() -> bool:
    """Whether this process holds the broker alone (inside `hold(exclusive=True)`)."""
    return _exclusive


def _take(fd: int, mode: int, path: Path, deadline: float, wait: float) -> None:
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                kind = "alone" if mode == fcntl.LOCK_EX else "beside other tests"
                raise TimeoutError(
                    f"waited {wait:g} s to use the RabbitMQ broker {kind} ({path} is held: "
                    "another test, or another run's, still uses it)"
                ) from None
            time.sleep(POLL)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextlib.contextmanager
def hold(*, exclusive: bool, folder: Path = FOLDER, wait: float = WAIT) -> Iterator[None]:
    """Hold the broker shared, or alone (`exclusive`), for the block; wait at most `wait`
    seconds for it (the lock files are in `folder`)."""
    global _exclusive
    deadline = time.monotonic() + wait
    paths = folder / "jobfsm-tests-broker.lock", folder / "jobfsm-tests-broker.turnstile"
    main, turnstile = _open(paths[0]), _open(paths[1])
    try:
        _take(turnstile, fcntl.LOCK_EX, paths[1], deadline, wait)
        try:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            _take(main, mode, paths[0], deadline, wait)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        _exclusive = exclusive
        try:
            yield
        finally:
            _exclusive = False
            fcntl.flock(main, fcntl.LOCK_UN)
    finally:
        os.close(turnstile)
        os.close(main)
