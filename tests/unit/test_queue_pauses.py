"""Paused queues (`fsm.service.pausing`): the engine that paused or resumed a queue sees
its change at its next claim, even when another of its threads read the pauses just
before the change and stores that read after it."""

from __future__ import annotations

import threading
from typing import Any

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.records import Job

from .helpers import OWNER

WHO = {"actor": "ada", "reason": "provider outage"}


class HeldRead:
    """A store whose next read of the paused queues is made, then held until released."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.hold = False
        self.read = threading.Event()
        self.release = threading.Event()

    def paused_queues(self) -> Any:
        seen = self._store.paused_queues()
        if self.hold:
            self.hold = False
            self.read.set()
            self.release.wait(10)
        return seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _claim_during(engine: Engine, store: HeldRead, change: Any) -> list[Job]:
    """A claim of `mail` in another thread reads the pauses; `change` runs while that
    read is held; the read then returns. Returns what that claim leased."""
    store.hold = True
    got: list[list[Job]] = []
    thread = threading.Thread(target=lambda: got.append(engine.claim(OWNER, ["mail"])))
    thread.start()
    assert store.read.wait(10)
    change()
    store.release.set()
    thread.join(10)
    return got[0]


def test_a_pause_is_seen_by_its_engine_at_once_though_a_read_before_it_returns_after_it() -> None:
    # given an engine whose claim in another thread read the pauses (none) just before
    # the same engine paused the queue, and stores that read once the pause returned
    store = HeldRead(MemoryStore())
    engine = Engine(store)
    engine.submit_many([("k", {"i": i}, {"queue": "mail"}) for i in range(3)])
    earlier = _claim_during(engine, store, lambda: engine.pause("mail", **WHO))
    assert len(earlier) == 1  # that claim began before the pause: it may lease
    # when the engine claims again after its pause returned
    leased = engine.claim(OWNER, ["mail"], limit=2)
    # then it leases nothing of the paused queue
    assert leased == []


def test_a_resume_is_seen_by_its_engine_at_once_though_a_read_before_it_returns_after_it() -> None:
    # given a paused queue, and a claim in another thread that read the pauses (mail
    # paused) just before the same engine resumed the queue
    store = HeldRead(MemoryStore())
    engine = Engine(store)
    engine.submit_many([("k", {"i": i}, {"queue": "mail"}) for i in range(3)])
    engine.pause("mail", **WHO)
    earlier = _claim_during(engine, store, lambda: engine.resume("mail", **WHO))
    assert earlier == []
    # when the engine claims again after its resume returned
    leased = engine.claim(OWNER, ["mail"], limit=2)
    # then it leases the queue's jobs
    assert len(leased) == 2


def test_another_engine_sees_a_pause_at_its_first_claim_and_the_pausing_one_at_once() -> None:
    # given two engines on one store, each having read the pauses (none)
    store = MemoryStore()
    first, second = Engine(store), Engine(store)
    first.submit_many([("k", {"i": i}, {"queue": "mail"}) for i in range(4)])
    assert len(first.claim(OWNER, ["mail"])) == 1
    # when the first pauses the queue
    first.pause("mail", **WHO)
    # then its own next claim leases nothing, and a third engine's first claim neither
    assert first.claim(OWNER, ["mail"]) == []
    assert Engine(store).claim(OWNER, ["mail"]) == []
    assert "mail" in second.paused()
