"""The broker's turns between RabbitMQ tests (tests/broker_lock.py), with real `flock`s.

Each holder below is a thread with open files of its own, which `flock` keeps apart as
it keeps apart two processes (a lock belongs to an open file, not to a process).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests import broker_lock


class Holder(threading.Thread):
    """Holds the lock in `folder` for `seconds`, noting when it got it and let it go."""

    def __init__(self, folder: Path, log: list[str], name: str, *, exclusive: bool) -> None:
        super().__init__(daemon=True)
        self.folder, self.log, self.label, self.exclusive = folder, log, name, exclusive
        self.release = threading.Event()
        self.holding = threading.Event()

    def run(self) -> None:
        with broker_lock.hold(exclusive=self.exclusive, folder=self.folder, wait=10):
            self.log.append(f"got {self.label}")
            self.holding.set()
            self.release.wait(10)
            self.log.append(f"left {self.label}")


def test_shared_holders_overlap_and_an_exclusive_one_waits_for_all_of_them(tmp_path: Path) -> None:
    log: list[str] = []
    first = Holder(tmp_path, log, "shared1", exclusive=False)
    second = Holder(tmp_path, log, "shared2", exclusive=False)
    first.start()
    second.start()
    # two shared holders hold at once
    assert first.holding.wait(5)
    assert second.holding.wait(5)

    # an exclusive one waits while either holds
    alone = Holder(tmp_path, log, "alone", exclusive=True)
    alone.start()
    time.sleep(0.3)
    assert not alone.holding.is_set()
    first.release.set()
    first.join(5)
    time.sleep(0.3)
    assert not alone.holding.is_set()
    second.release.set()
    assert alone.holding.wait(5)
    alone.release.set()
    alone.join(5)
    assert log[-2:] == ["got alone", "left alone"]


def test_a_waiting_exclusive_holder_goes_before_shared_ones_that_come_after_it(
    tmp_path: Path,
) -> None:
    # given a shared holder, and an exclusive one waiting behind it
    log: list[str] = []
    running = Holder(tmp_path, log, "running", exclusive=False)
    running.start()
    assert running.holding.wait(5)
    alone = Holder(tmp_path, log, "alone", exclusive=True)
    alone.start()
    time.sleep(0.3)

    # when a shared one comes after, while the first still holds
    late = Holder(tmp_path, log, "late", exclusive=False)
    late.start()
    time.sleep(0.3)
    # then it does not join the running shared holder (the turnstile is closed)
    assert not late.holding.is_set()

    running.release.set()
    assert alone.holding.wait(5)
    assert not late.holding.is_set()  # not while the exclusive one holds
    alone.release.set()
    assert late.holding.wait(5)
    late.release.set()
    late.join(5)
    assert log == [
        "got running",
        "left running",
        "got alone",
        "left alone",
        "got late",
        "left late",
    ]


def test_a_wait_past_its_bound_fails_naming_the_lock_file(tmp_path: Path) -> None:
    log: list[str] = []
    running = Holder(tmp_path, log, "running", exclusive=False)
    running.start()
    assert running.holding.wait(5)
    try:
        started = time.monotonic()
        with (
            pytest.raises(TimeoutError, match=r"waited 0.5 s .*jobfsm-tests-broker\.lock"),
            broker_lock.hold(exclusive=True, folder=tmp_path, wait=0.5),
        ):
            pass
        assert time.monotonic() - started < 3
        # and the failed waiter left the turnstile open: a shared holder still gets in
        with broker_lock.hold(exclusive=False, folder=tmp_path, wait=1):
            pass
    finally:
        running.release.set()
        running.join(5)


def test_only_an_exclusive_holder_is_told_it_holds_the_broker_alone(tmp_path: Path) -> None:
    assert not broker_lock.exclusive_held()
    with broker_lock.hold(exclusive=False, folder=tmp_path, wait=1):
        assert not broker_lock.exclusive_held()
    with broker_lock.hold(exclusive=True, folder=tmp_path, wait=1):
        assert broker_lock.exclusive_held()
    assert not broker_lock.exclusive_held()
