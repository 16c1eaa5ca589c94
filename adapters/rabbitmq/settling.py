"""Settling deliveries on the consumer's I/O thread, mixed into `Consumer`: acks (batched
where no unsettled delivery lies below), dead letters, and deliveries given back before
the broker's consumer timeout. A tag is settled only on its own channel generation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from typing import Any, NamedTuple, Protocol

import attrs

from ._pika import pika_errors
from .config import RabbitConfig
from .messages import dead_letter_properties

log = logging.getLogger(__name__)


class Token(NamedTuple):
    """A delivery tag and the channel generation it belongs to.

    A named tuple, not an attrs class: it is built once per message and hashed as a
    dict key several times per job id the message names, and a tuple hashes in C.
    """

    generation: int
    tag: int
    queue: str


@attrs.frozen
class Delivered:
    token: Token
    body: bytes
    received: float  # monotonic seconds


class ConsumerWatch(Protocol):
    """What a fault model sees of a consumer, called on its I/O thread (`Consumer.watch`):
    each new channel, each message as it arrives, each delivery as it is dead-lettered."""

    def opened(self, connection: Any, channel: Any, generation: int) -> None:
        """A new channel of `generation` is open, before it subscribes."""

    def received(self, generation: int, method: Any) -> None:
        """A message arrived (`method` is pika's Basic.Deliver), before it is buffered."""

    def dead_lettering(self, token: Token) -> None:
        """The delivery `token` is about to be dead-lettered (its ack needs no lease)."""


class Settling:
    """The settling half of `Consumer` (its state is the consumer's)."""

    _config: RabbitConfig
    _cond: threading.Condition
    _inbox: deque[Delivered]
    _outstanding: dict[Token, float]
    _channel: Any
    _generation: int
    stats: Counter[str]
    watch: ConsumerWatch | None

    def _current(self, token: Token, what: str) -> bool:
        """True if `token` may be settled now: its channel is the live one and the
        delivery is still ours (not already returned to the broker)."""
        channel = self._channel
        if token.generation == self._generation and channel is not None and channel.is_open:
            with self._cond:
                if self._outstanding.pop(token, None) is not None:
                    return True
            self.stats["late_settles"] += 1
            log.debug("delivery tag %d was already returned to the broker", token.tag)
            return False
        self.stats["stale_tags"] += 1
        log.warning(
            "not %s delivery tag %d of channel generation %d on generation %d: tags are only "
            "valid on their own channel (the broker redelivers that message)",
            what,
            token.tag,
            token.generation,
            self._generation,
        )
        return False

    def _ack(self, tokens: list[Token]) -> None:
        """Ack settled deliveries: one `multiple` ack for those below every delivery
        still held (buffered or handed out), one ack each for the rest.

        Each basic.ack is a socket write; a claim settles a whole batch at once, and
        acking its deliveries one by one cost the I/O thread more than the claim.
        """
        tags = sorted(t.tag for t in tokens if self._current(t, "acking"))
        if not tags:
            return
        with self._cond:
            held = [i.token.tag for i in self._inbox if i.token.generation == self._generation]
            held += [t.tag for t in self._outstanding if t.generation == self._generation]
        floor = min(held, default=tags[-1] + 1)
        below = sum(1 for tag in tags if tag < floor)
        single = 0
        if below > 1:  # every unacked delivery up to this tag is one of ours
            self._channel.basic_ack(tags[below - 1], multiple=True)
            single = below
        for tag in tags[single:]:
            self._channel.basic_ack(tag)
        self.stats["acked"] += len(tags)

    def _dead_letter(self, token: Token, body: bytes, reason: str) -> None:
        if self.watch is not None:
            self.watch.dead_lettering(token)
        if not self._current(token, "dead-lettering"):
            return
        queue_name = self._config.queue_name(token.queue) if token.queue else ""
        try:
            self._channel.basic_publish(
                exchange=self._config.dead_letter_exchange,
                routing_key=queue_name,
                body=body,
                properties=dead_letter_properties(reason, queue_name),
            )
        except (pika_errors.NackError, pika_errors.UnroutableError):
            # Let the broker dead-letter it through the queue's x-dead-letter-exchange.
            self._channel.basic_nack(token.tag, requeue=False)
        else:
            self._channel.basic_ack(token.tag)
        self.stats["dead_lettered"] += 1

    def _return_held(self) -> None:
        """Give back deliveries buffered, or handed out and never settled, for longer than
        `max_hold`, so no delivery meets the broker's consumer timeout (all slots busy,
        or a worker whose claim failed)."""
        cutoff = time.monotonic() - self._config.max_hold
        with self._cond:
            buffered = []
            while self._inbox and self._inbox[0].received < cutoff:
                item = self._inbox.popleft()
                self._outstanding[item.token] = item.received
                buffered.append(item.token)
            if self._config.ack_on_settle:
                held = [t for t, at in self._outstanding.items() if at < cutoff]
            else:  # test-only mode: holding handed-out deliveries is the point
                held = buffered
        for token in held:
            if self._current(token, "returning"):
                self._channel.basic_nack(token.tag, requeue=True)
                self.stats["returned"] += 1
