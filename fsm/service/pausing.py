"""Paused queues: an operator stops every worker of a store from leasing a queue's jobs.

`jobfsm pause QUEUE --actor --reason` (or `Engine.pause`) records the pause in the
store (`fsm.ports.PausesQueues`); each engine's claims leave paused queues out, re-
reading the pauses at most every PAUSE_SEEN_WITHIN seconds, so a pause reaches every
worker within that bound. Running jobs finish; submits are still taken; `resume`
lets workers lease the queue again.
"""

from __future__ import annotations

import logging
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
        self._read_at = None
        log.warning("queue %s paused by %s: %s", queue, actor, reason)
        return pause

    def resume(self, queue: str, *, actor: str, reason: str) -> bool:
        store = self._checked("resume", queue, actor, reason)
        was = store.resume_queue(queue)
        self._read_at = None
        log.warning("queue %s resumed by %s: %s", queue, actor, reason)
        return was

    def paused(self) -> dict[str, QueuePause]:
        return self.store.paused_queues() if isinstance(self.store, PausesQueues) else {}

    def unpaused(self, queues: Sequence[str]) -> tuple[str, ...]:
        """`queues` less the paused ones (re-read at most every PAUSE_SEEN_WITHIN s)."""
        if not isinstance(self.store, PausesQueues):
            return tuple(queues)
        tick = time.monotonic()
        if self._read_at is None or tick - self._read_at >= PAUSE_SEEN_WITHIN:
            self._paused = frozenset(self.store.paused_queues())
            self._read_at = tick
        return tuple(q for q in queues if q not in self._paused)
