"""Paused queues: an operator stops every worker of a store from leasing a queue's jobs.

`jobfsm pause QUEUE --actor --reason` (or `Engine.pause`) records the pause in the
store (`fsm.ports.PausesQueues`); each engine's claims leave paused queues out, re-
reading the pauses at most every PAUSE_SEEN_WITHIN seconds, so a pause reaches every
worker within that bound; the engine that paused or resumed a queue sees it at its
next claim (a read of the pauses that began before the change, in another thread of
the same engine, is not kept). Running jobs finish; submits are still taken; `resume`
lets workers lease the queue again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from ..errors import BadInput
from ..inputs import check_name, check_operator_text
from ..ports import Clock, PausesQueues, QueuePause, Store

log = logging.getLogger(__name__)

#: a pause or resume of a queue reaches every engine's claims within this many seconds
PAUSE_SEEN_WITHIN = 1.0


class QueuePauses:
    """One engine's view of the paused queues of its store."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        #: the paused queues as last read, and when (monotonic)
        self._paused: frozenset[str] = frozenset()
        self._read_at: float | None = None
        #: bumped by each pause and resume of this engine: a read that began before one
        #: is not kept (it may not show the change)
        self._changes = 0
        self._lock = threading.Lock()

    def _pausing(self) -> PausesQueues:
        if not isinstance(self.store, PausesQueues):
            raise BadInput(f"{type(self.store).__name__} cannot pause queues")
        return self.store

    def _checked(self, action: str, queue: str, actor: str, reason: str) -> PausesQueues:
        store = self._pausing()
        check_name("queue", queue)
        for key, value in (("actor", actor), ("reason", reason)):
            check_operator_text(f"{action} of queue {queue!r}", key, value)
        return store

    def pause(self, queue: str, *, actor: str, reason: str) -> QueuePause:
        store = self._checked("pause", queue, actor, reason)
        pause = QueuePause(queue=queue, actor=actor, reason=reason, at=self.clock.now())
        store.pause_queue(pause)
        self._changed()
        log.warning("queue %s paused by %s: %s", queue, actor, reason)
        return pause

    def resume(self, queue: str, *, actor: str, reason: str) -> bool:
        store = self._checked("resume", queue, actor, reason)
        was = store.resume_queue(queue)
        self._changed()
        log.warning("queue %s resumed by %s: %s", queue, actor, reason)
        return was

    def _changed(self) -> None:
        """This engine changed the pauses: its next claim reads them again."""
        with self._lock:
            self._changes += 1
            self._read_at = None

    def paused(self) -> dict[str, QueuePause]:
        return self.store.paused_queues() if isinstance(self.store, PausesQueues) else {}

    def unpaused(self, queues: Sequence[str]) -> tuple[str, ...]:
        """`queues` less the paused ones (re-read at most every PAUSE_SEEN_WITHIN s)."""
        if not isinstance(self.store, PausesQueues):
            return tuple(queues)
        tick = time.monotonic()
        with self._lock:
            paused, read_at, changes = self._paused, self._read_at, self._changes
        if read_at is None or tick - read_at >= PAUSE_SEEN_WITHIN:
            paused = frozenset(self.store.paused_queues())
            with self._lock:
                if self._changes == changes:  # no pause or resume of ours since the read
                    self._paused, self._read_at = paused, tick
        return tuple(q for q in queues if q not in paused)
