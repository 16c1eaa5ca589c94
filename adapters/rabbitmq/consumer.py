"""The consumer: one I/O thread owns the connection; other threads reach it through
`add_callback_threadsafe`. It buffers deliveries, acks settled ones, dead-letters
poison, detects closures while idle, and recovers within a budget.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from . import topology
from ._pika import pika, pika_errors
from .classify import ConsumerCancelled, ConsumptionEnded, Verdict, classify, once_connected
from .config import RabbitConfig
from .errors import DeliveryFailed
from .settling import ConsumerWatch, Delivered, Settling, Token
from .url import redact

log = logging.getLogger(__name__)

#: the first wait between recovery attempts; each next one is RECOVERY_GROWTH times longer,
#: up to recovery_interval. 1.5 rather than 2: the wait after a broker returns is about
#: half the outage, not all of it (a 13 s restart resumed in ~3 s median, ~5 s p95)
FIRST_RECOVERY_DELAY = 1.0
RECOVERY_GROWTH = 1.5
#: AMQP's prefetch_count is an unsigned short
MAX_PREFETCH = 65_535


def _base_delay(attempt: int, interval: float) -> float:
    """The wait before recovery attempt `attempt` (>= 2) before its jitter."""
    return min(interval, FIRST_RECOVERY_DELAY * RECOVERY_GROWTH ** min(attempt - 2, 64))


def recovery_delay(attempt: int, interval: float, rng: random.Random) -> float:
    """Seconds to wait before recovery attempt `attempt` (the first is immediate): 1 s,
    growing 1.5x per attempt, capped at `interval`, times a random factor in [0.5, 1] so
    that the workers of one broker do not all reconnect in the same instant."""
    if attempt <= 1:
        return 0.0
    return _base_delay(attempt, interval) * rng.uniform(0.5, 1.0)


def recovery_wait(attempts: int, interval: float) -> float:
    """The longest time a recovery of `attempts` attempts spends waiting between them: the
    waits before attempts 2..`attempts` without their jitter (with it: half to all of it)."""
    return sum(_base_delay(n, interval) for n in range(2, attempts + 1))


def budget_text(config: RabbitConfig) -> str:
    """The recovery budget in words, for the logs: attempts and time."""
    attempts, interval = config.recovery_attempts, config.recovery_interval
    return (
        f"at most {attempts} attempt(s) within {recovery_wait(attempts, interval):.0f} s of "
        f"waits (recovery_attempts={attempts}, recovery_interval={interval:g} s; each "
        f"attempt bounded by connect_timeout={config.connect_timeout:g} s)"
    )


class Consumer(Settling):
    """Consumes the work queues of one worker on a dedicated I/O thread."""

    def __init__(
        self, config: RabbitConfig, on_recovered: Callable[[str], None] | None = None
    ) -> None:
        self._config = config
        #: told (with the reason) each time the consumer reconnects after a loss
        self._on_recovered = on_recovered
        self._cond = threading.Condition()
        self._inbox: deque[Delivered] = deque()
        #: handed to the worker, not settled yet: token -> monotonic time handed out
        self._outstanding: dict[Token, float] = {}
        self._ops: deque[Callable[[], None]] = deque()
        self._acks: list[Token] = []  # settled, to be acked by the I/O thread's next drain
        self._wake_pending = False
        self._interrupted = False  # set by wake(): the next blocked take returns at once
        self._queues: tuple[str, ...] = ()
        self._prefetch = config.prefetch
        self._generation = 0
        self._conn: Any = None
        self._channel: Any = None
        self._subscribed = False
        self._tag_queues: dict[str, str] = {}
        self._cancelled: list[str] = []
        self._stop = threading.Event()
        self._ready = False
        self._failure: DeliveryFailed | None = None
        self._settled_first = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        #: counters for operators and tests: recoveries, stale_tags, acked, returned, ...
        self.stats: Counter[str] = Counter()
        #: a fault model watching the I/O thread (`adapters.rabbitmq.testing`); set it
        #: before `start`
        self.watch: ConsumerWatch | None = None

    # --- called from any thread --------------------------------------------------------

    def start(self, queues: tuple[str, ...]) -> None:
        """Connect and declare on the I/O thread; raise at once if that is unrecoverable."""
        if self._thread is not None:
            raise RuntimeError("the RabbitMQ consumer is already started")
        self._queues = queues
        self._thread = threading.Thread(target=self._run, name="jobfsm-rabbitmq-io", daemon=True)
        self._thread.start()
        # The first outcome comes within one bounded connect (socket + stack timeouts).
        self._settled_first.wait(self._config.connect_timeout * 4 + 5)
        failure = self.failure
        if failure is not None:
            raise failure

    @property
    def ready(self) -> bool:
        return self._ready and self.failure is None

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def failure(self) -> DeliveryFailed | None:
        thread = self._thread
        if (
            self._failure is None
            and thread is not None
            and not thread.is_alive()
            and not self._stop.is_set()
        ):  # the I/O thread must never end on its own; if it did, say so
            self._fail("the RabbitMQ I/O thread ended although nobody stopped it")
        return self._failure

    def want_prefetch(self, capacity: int) -> None:
        """Learn the prefetch from the first poll (the executor's free slots)."""
        if self._prefetch is None and capacity > 0:
            self._prefetch = min(capacity, MAX_PREFETCH)
            self._wake()

    def take(self, capacity: int, timeout: float) -> list[Delivered]:
        """At most `capacity` buffered deliveries, waiting at most `timeout` seconds."""
        with self._cond:
            if not self._inbox and timeout > 0 and not self._interrupted:
                self._cond.wait_for(
                    lambda: (
                        bool(self._inbox)
                        or self._interrupted
                        or self._failure is not None
                        or self._stop.is_set()
                    ),
                    timeout,
                )
            self._interrupted = False
            out: list[Delivered] = []
            now = time.monotonic()
            while self._inbox and len(out) < capacity:
                item = self._inbox.popleft()
                self._outstanding[item.token] = now
                out.append(item)
            return out

    def wake(self) -> None:
        """Make a blocked `take` return now (the worker is stopping)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def holds(self, token: Token) -> bool:
        """True while the delivery is handed out and still ours (not settled, not returned
        to the broker, not on a channel that was lost since)."""
        with self._cond:
            return token.generation == self._generation and token in self._outstanding

    def ack(self, token: Token) -> None:
        self._for_io_thread(lambda: self._acks.append(token))

    def dead_letter(self, token: Token, body: bytes, reason: str) -> None:
        self._submit(lambda: self._dead_letter(token, body, reason))

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _submit(self, op: Callable[[], None]) -> None:
        self._for_io_thread(lambda: self._ops.append(op))

    def _for_io_thread(self, add: Callable[[], None]) -> None:
        """Queue work for the I/O thread (under the lock) and wake it once per drain."""
        with self._cond:
            add()
            if self._wake_pending:
                return
            self._wake_pending = True
        self._wake()

    def _wake(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.add_callback_threadsafe(self._drain)
        except Exception:  # closed connection: the I/O loop drains on its next turn
            log.debug("wake-up of the RabbitMQ I/O thread skipped: connection closed")

    # --- the I/O thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as err:  # a bug here must flag the worker, never die silently
            log.exception("the RabbitMQ I/O thread failed")
            self._fail(
                f"the RabbitMQ I/O thread stopped on an unexpected error: "
                f"{type(err).__name__}: {err}"
            )
        finally:
            self._ready = False
            self._drop_session()
            self._settled_first.set()
            with self._cond:
                self._cond.notify_all()

    def _loop(self) -> None:
        """Serve; on a recoverable failure reconnect, at most `recovery_attempts` times
        since every subscription was last restored (or since start), waiting
        `recovery_delay` before each attempt but the first."""
        config = self._config
        used = 0  # recovery attempts used since every subscription was last restored
        lost_at = 0.0  # monotonic time of the loss being recovered from
        while not self._stop.is_set():
            try:
                self._open()
                if used:
                    self.stats["recoveries"] += 1
                    if self._on_recovered is not None:
                        self._on_recovered(f"reconnected after {used} attempt(s)")
                    log.warning(
                        "RabbitMQ consumer recovered (generation %d) after %d attempt(s) in %.1f s",
                        self._generation,
                        used,
                        time.monotonic() - lost_at,
                    )
                used = 0
                self._settled_first.set()
                self._serve()
            except Exception as err:
                self._ready = False
                self._drop_session()
                if self._stop.is_set():
                    break
                verdict = classify(err)
                if self._generation > 0:  # the broker answered AMQP at this URL before
                    verdict = once_connected(verdict)
                if verdict.recoverable:  # a fatal one is logged once, by _fail
                    self._log_failure(verdict)
                else:
                    self.stats[f"failure:{verdict.kind}"] += 1
                detail = f"({verdict.kind}) {config.scrub(verdict.detail)}"
                if not verdict.recoverable:
                    self._fail(f"unrecoverable RabbitMQ failure at {redact(config.url)} {detail}")
                    break
                if config.recovery_attempts == 0:
                    self._fail(
                        "RabbitMQ connection lost and recovery is disabled "
                        f"(recovery_attempts=0): {detail}"
                    )
                    break
                now = time.monotonic()
                if used == 0:
                    lost_at = now
                    self._announce_recovery(verdict)
                if used >= config.recovery_attempts:
                    self._fail(
                        f"RabbitMQ recovery budget spent: {used} attempts in "
                        f"{now - lost_at:.1f} s (recovery_attempts={config.recovery_attempts}, "
                        f"recovery_interval={config.recovery_interval:g} s); "
                        f"last failure {detail}"
                    )
                    break
                self._settled_first.set()  # start() returns; ready stays false meanwhile
                delay = recovery_delay(used + 1, config.recovery_interval, self._rng)
                if delay > 0 and self._stop.wait(delay):
                    break  # close() interrupts the wait
                used += 1
                self.stats["recovery_attempts"] += 1

    def _announce_recovery(self, verdict: Verdict) -> None:
        """One line when a recovery begins, naming its budget: at start (the broker was
        never reached) the worker would otherwise retry quietly, not ready meanwhile."""
        where = redact(self._config.url)
        if self._generation == 0:
            log.warning(
                "RabbitMQ broker at %s not reachable at start (%s): not ready, retrying with "
                "%s; the worker exits once they are spent",
                where,
                verdict.kind,
                budget_text(self._config),
            )
        else:
            log.warning(
                "RabbitMQ connection to %s lost (%s): reconnecting with %s",
                where,
                verdict.kind,
                budget_text(self._config),
            )

    def _log_failure(self, verdict: Verdict) -> None:
        self.stats[f"failure:{verdict.kind}"] += 1
        queues = [self._config.queue_name(q) for q in self._queues]
        detail = self._config.scrub(verdict.detail)
        if verdict.kind == "ack-timeout":
            log.error(
                "RabbitMQ closed the consumer channel: ACK timeout (a delivery stayed unacked "
                "past the broker's consumer_timeout) on queues %s: %s",
                queues,
                detail,
            )
        else:
            level = logging.WARNING if verdict.recoverable else logging.ERROR
            log.log(level, "RabbitMQ consumer on %s: %s: %s", queues, verdict.kind, detail)

    def _fail(self, message: str) -> None:
        message = self._config.scrub(message)
        self._failure = DeliveryFailed(message)
        log.error("%s", message)
        with self._cond:
            self._cond.notify_all()

    def _open(self) -> None:
        self._conn = pika.BlockingConnection(topology.parameters(self._config))
        topology.declare_dead_letters(self._conn, self._config)
        channel = self._conn.channel()
        channel.confirm_delivery()  # dead-letter republishes are confirmed before the ack
        channel.add_on_cancel_callback(self._on_cancel)
        topology.declare_queues(channel, self._config, self._queues)
        with self._cond:
            dropped = len(self._inbox)
            self._inbox.clear()  # the broker redelivers what the old channel held
            self._outstanding.clear()
        if dropped:
            log.info("dropped %d buffered deliveries of the old channel", dropped)
        self._generation += 1
        self._channel = channel
        if self.watch is not None:
            self.watch.opened(self._conn, channel, self._generation)
        self._subscribed = False
        self._cancelled = []
        self._tag_queues = {}
        self._subscribe()

    def _subscribe(self) -> None:
        if self._subscribed or self._prefetch is None:
            return
        self._channel.basic_qos(prefetch_count=self._prefetch)
        for queue in self._queues:
            tag = self._channel.basic_consume(self._config.queue_name(queue), self._on_message)
            self._tag_queues[tag] = queue
        self._subscribed = True
        self._ready = True

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._conn.process_data_events(time_limit=self._config.idle_check)
            self._drain()
            channel = self._channel
            if channel.is_closed:
                # process_data_events does not raise for a channel the broker closed.
                reason = getattr(channel, "_closing_reason", None)
                raise (
                    reason
                    if isinstance(reason, Exception)
                    else pika_errors.ChannelClosed(0, "channel closed")
                )
            if self._cancelled:
                names = [self._config.queue_name(q) for q in self._cancelled]
                raise ConsumerCancelled(f"the broker cancelled the consumers of {names}")
            if self._subscribed and not channel.consumer_tags:
                raise ConsumptionEnded("no consumer left on the channel")
            self._subscribe()
            self._return_held()
        self._drain()  # settle what was settled before close() asked us to stop

    def _drop_session(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        self._subscribed = False
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception:  # a broken connection: nothing left to close cleanly
                log.debug("closing the consumer connection failed", exc_info=True)

    def _on_message(self, _channel: Any, method: Any, _properties: Any, body: bytes) -> None:
        if self.watch is not None:
            self.watch.received(self._generation, method)
        queue = self._tag_queues.get(method.consumer_tag, "")
        token = Token(self._generation, method.delivery_tag, queue)
        limit = self._config.max_message_bytes
        if len(body) > limit:
            # Never buffered or decoded: dead-lettered (a bounded copy) by the next drain.
            reason = f"message is {len(body)} bytes, over max_message_bytes ({limit})"
            log.warning(
                "dead-lettering a message from queue %r on arrival: %s",
                self._config.queue_name(queue) if queue else "?",
                reason,
            )
            copy = body[:limit]
            with self._cond:
                self._outstanding[token] = time.monotonic()
                self._ops.append(lambda: self._dead_letter(token, copy, reason))
            return
        item = Delivered(token, body, time.monotonic())
        with self._cond:
            self._inbox.append(item)
            self._cond.notify()

    def _on_cancel(self, frame: Any) -> None:
        self._cancelled.append(self._tag_queues.get(frame.method.consumer_tag, "?"))

    def _drain(self) -> None:
        with self._cond:
            self._wake_pending = False
            ops = list(self._ops)
            self._ops.clear()
            acks, self._acks = self._acks, []
        for op in ops:
            op()
        if acks:
            self._ack(acks)
