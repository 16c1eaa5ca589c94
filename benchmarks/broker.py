"""What the benchmarks ask of RabbitMQ: a queue's counts, a drained queue, cleaning up.

`QueueProbe` reads a queue's `ready` count and consumer count over AMQP (a passive
`queue.declare`, milliseconds), and `broker_counts` reads ready and unacknowledged
counts from `rabbitmqctl list_queues` (exact, but a call costs about 0.3 s: an Erlang
VM starts each time). `BrokerDrain` is a RabbitMQ peer's side of `runner.drain`.
Every name a run declares is its own (a fresh queue per run), and `delete` removes
exactly those names; jobfsm's dead-letter pair only if the run created it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any

import pika
import pika.exceptions

from benchmarks.harness import AMQP_URL, wait_for

DEAD_LETTER = "jobfsm.dead-letter"  # jobfsm's dead-letter queue and exchange, shared


def connect() -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(AMQP_URL))


def delete(queues: Iterable[str], exchanges: Iterable[str] = ()) -> None:
    """Delete the named queues and exchanges; a name already gone is no error."""
    conn = connect()
    try:
        for name in queues:
            with suppress(pika.exceptions.ChannelClosedByBroker):
                conn.channel().queue_delete(name)
        for name in exchanges:
            with suppress(pika.exceptions.ChannelClosedByBroker):
                conn.channel().exchange_delete(name)
    finally:
        with suppress(Exception):
            conn.close()


def queue_depth(name: str) -> int | None:
    """Ready messages in `name`, or None if there is no such queue."""
    conn = connect()
    try:
        try:
            return int(conn.channel().queue_declare(name, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return None
    finally:
        with suppress(Exception):
            conn.close()


def delete_jobfsm_names(queues: Iterable[str], keep_dead_letter: bool) -> None:
    """Delete what a jobfsm run declared: its queues, and the dead-letter pair only if
    it existed before the run (`keep_dead_letter` False: the run made it)."""
    dead = () if keep_dead_letter else (DEAD_LETTER,)
    delete([*queues, *dead], dead)


class QueueProbe:
    """An AMQP connection that reads a queue's ready and consumer counts."""

    def __init__(self) -> None:
        self.conn = connect()
        self.channel = self.conn.channel()

    def counts(self, queue: str) -> tuple[int, int] | None:
        """(ready messages, consumers), or None while the queue does not exist."""
        try:
            ok: Any = self.channel.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as err:
            if err.reply_code != 404:
                raise
            self.channel = self.conn.channel()
            return None
        return int(ok.method.message_count), int(ok.method.consumer_count)

    def ready(self, queue: str) -> int:
        got = self.counts(queue)
        if got is None:
            raise RuntimeError(f"benchmark: queue {queue} vanished")
        return got[0]

    def wait_queued(self, queue: str, count: int) -> None:
        """Until `queue` holds `count` ready messages (no consumer): all publishes arrived."""
        wait_for(lambda: self.ready(queue) >= count, 60.0, f"{count} messages in {queue}", 0.001)
        if (got := self.ready(queue)) != count:
            raise RuntimeError(f"benchmark: {queue} holds {got} messages, expected {count}")

    def wait_consumers(self, queue: str, count: int, wait: Callable[..., None]) -> None:
        """Until `count` consumers are on `queue`; `wait` is the workers' (`Workers.wait`)."""

        def enough() -> bool:
            got = self.counts(queue)
            return got is not None and got[1] >= count

        wait(enough, 90.0, f"{count} consumers on {queue}", 0.05)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


RABBITMQCTL = shutil.which("rabbitmqctl")


def broker_counts(queue: str) -> tuple[int, int]:
    """(ready, unacknowledged) for `queue`, read by `rabbitmqctl list_queues` from the broker."""
    if RABBITMQCTL is None:
        raise RuntimeError("benchmark: rabbitmqctl is not on PATH; cannot read unacked counts")
    argv = [RABBITMQCTL, "-q", "--no-table-headers", "list_queues", "name"]
    argv += ["messages_ready", "messages_unacknowledged"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == queue:
            return int(parts[1]), int(parts[2])
    raise RuntimeError(f"benchmark: rabbitmqctl does not list queue {queue}")


def wait_drained(
    probe: QueueProbe,
    queue: str,
    started: float,
    limit: float,
    check: Callable[[], None],
    *,
    at_ready: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Wait until `queue` holds nothing, ready or unacked; return two elapsed times.

    Called after the last publish has reached the queue (see `BrokerDrain`: a passive
    queue.declare is no such barrier, RabbitMQ answers it ahead of deliveries still in
    the queue process's mailbox). The first time is when the queue's ready count
    reached 0 (passive queue.declare, polled every 2 ms): at that moment at most the
    consumers' total prefetch is still unacknowledged, so it is early by at most that
    many messages. The second is when `rabbitmqctl` first reports ready + unacked == 0
    (the end of that call): late by at most one call (~0.3 s). The true end lies
    between the two. `at_ready` is called at the first, before any `rabbitmqctl` (an
    Erlang VM of its own) runs; `check` raises if a worker died.
    """

    def no_ready() -> bool:
        check()
        return probe.ready(queue) == 0

    wait_for(no_ready, limit, f"ready messages on {queue} to reach 0", step=0.002)
    ready_after = time.perf_counter() - started
    if at_ready is not None:
        at_ready()

    def empty() -> bool:
        check()
        return sum(broker_counts(queue)) == 0

    wait_for(empty, limit, f"ready + unacked on {queue} to reach 0 (rabbitmqctl)", step=0.0)
    return ready_after, time.perf_counter() - started


class BrokerDrain:
    """A RabbitMQ peer in `runner.drain`: `send` publishes one job; `barrier` returns once
    every message published on the sending channel is in the queue (a basic.get on
    that channel, which RabbitMQ's queue process handles after those deliveries); done
    is the broker's record (`wait_drained`), its two ends both reported."""

    def __init__(
        self,
        queue: str,
        send: Callable[[], object],
        barrier: Callable[[], None],
        probe: QueueProbe,
        check: Callable[[], None],
    ) -> None:
        self.queue = queue
        self.send = send
        self.barrier = barrier
        self.probe = probe
        self.check = check

    def enqueue(self, n: int) -> None:
        for _ in range(n):
            self.send()
        self.barrier()

    def finish(
        self, n: int, started: float, at_end: Callable[[], None], limit: float
    ) -> tuple[float, ...]:
        return wait_drained(self.probe, self.queue, started, limit, self.check, at_ready=at_end)
