"""The job ids of multi-job wake-ups, handed to the worker as its free slots allow.

A version-2 message names up to `messages.MAX_IDS` jobs; a worker may have fewer free
slots. Its ids are handed out over the next polls (a `Part` each) and the message is
acked once every part is settled: the worker leased the job durably, or found it not
claimable. Until then the message stays unacked, exactly like a buffered one-job
delivery, and under the same bounds:

- a message is taken from the consumer only when the ids at hand do not fill the
  worker's free slots, so the ids waiting here are fewer than one poll's capacity
  plus one message's ids;
- a message still unsettled after `max_hold` seconds is returned to the broker by the
  consumer (`Consumer._return_held`) and redelivered whole; its parts still waiting here
  are dropped when next looked at (`Consumer.holds` says so), and the ids already leased
  are found not claimable when it comes back, so nothing runs twice (the store's fences
  decide); a message whose handed-out parts are never settled is forgotten here once
  the consumer has given it back (checked at most every PURGE_EVERY seconds);
- a channel lost, or a worker killed, returns the unacked message to the broker, which
  redelivers every id it names.

Why not republish the rest and ack at once: that is one more durable broker commit
on the worker's claim path for every message larger than the free slots, and a
republish that fails needs this same fallback anyway.

`poll` and `settle` are called by the worker's claim loop; the lock only guards the
bookkeeping against a delivery used from more than one thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import NamedTuple

from fsm.ports import Wakeup

from .consumer import Consumer
from .settling import Token

#: seconds between two purges of messages whose delivery is no longer ours
PURGE_EVERY = 1.0


class Part(NamedTuple):
    """One job id of a multi-job message: the id at `at` of its `of` ids (a named
    tuple, like `Token`: one is built and hashed per job id)."""

    message: Token
    at: int
    of: int

    @property
    def queue(self) -> str:
        return self.message.queue


class Parts:
    """Ids of multi-job messages not yet handed out, and the parts not yet settled."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._lock = threading.Lock()
        self._waiting: deque[tuple[Part, str]] = deque()
        #: message -> indexes of its parts not settled yet
        self._unsettled: dict[Token, set[int]] = {}
        self._purged_at = time.monotonic()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, message: Token, job_ids: tuple[str, ...]) -> None:
        with self._lock:
            self._unsettled[message] = set(range(len(job_ids)))
            for n, job_id in enumerate(job_ids):
                self._waiting.append((Part(message, n, len(job_ids)), job_id))

    def take(self, capacity: int) -> list[Wakeup]:
        """Up to `capacity` waiting ids, skipping those of messages no longer ours."""
        out: list[Wakeup] = []
        with self._lock:
            self._purge()
            held: dict[Token, bool] = {}  # one look per message and call
            while self._waiting and len(out) < capacity:
                part, job_id = self._waiting.popleft()
                message = part.message
                if message not in held:
                    held[message] = message in self._unsettled and self._consumer.holds(message)
                if not held[message]:
                    self._unsettled.pop(message, None)
                    continue  # its message went back to the broker, which redelivers it
                out.append(Wakeup(job_id, part))
        return out

    def settle(self, part: Part) -> Token | None:
        """Mark `part` settled; the message to ack if it was the last one, else None."""
        with self._lock:
            left = self._unsettled.get(part.message)
            if left is None:
                return None  # returned to the broker meanwhile: the ack would be stale
            left.discard(part.at)
            if left:
                return None
            del self._unsettled[part.message]
            return part.message

    def _purge(self) -> None:
        """Forget messages the consumer no longer holds (returned after `max_hold`, or
        of a lost channel), at most every PURGE_EVERY seconds; under the lock."""
        now = time.monotonic()
        if not self._unsettled or now - self._purged_at < PURGE_EVERY:
            return
        self._purged_at = now
        for message in [m for m in self._unsettled if not self._consumer.holds(m)]:
            del self._unsettled[message]
        if len(self._unsettled) == 0:
            self._waiting.clear()
