"""RabbitMQ test helpers: unique broker names per test (deleted afterwards), broker faults on
this test's own connections only (through a relay the test owns: the broker is shared),
and a small worker loop built on the Engine."""

from __future__ import annotations

import contextlib
import gc
import re
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pika
import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import RabbitDelivery
from adapters.rabbitmq.relay import Relay
from fsm import Engine, LeaseLost, Owner
from fsm.records import Decision, Job
from tests import broker_lock

RABBITMQCTL_TIMEOUT = 120.0


def rabbitmqctl(*args: str, timeout: float = RABBITMQCTL_TIMEOUT) -> str:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout, check=True
    )
    return done.stdout


@pytest.fixture
def relay(rabbit_url: str) -> Iterator[Relay]:
    """A relay to the broker owned by the test: clients given `relay.url` are the only ones
    its `force_close()`, `cut()` and `outage()` touch (never the broker's other clients)."""
    with Relay(rabbit_url) as owned:
        yield owned
    _collect_connections_lost_in_the_outage()


def _collect_connections_lost_in_the_outage() -> None:
    """Reclaim, here, the pika connections that died while the relay refused them.

    A connection attempt cut off during an outage is only freed by the garbage
    collector, which closes its sockets with a ResourceWarning wherever it happens to
    run: once (1 CI run in 3) inside an unrelated SQLite test, which failed. Collected
    here, inside the test that made the outage, it is expected.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


#: the broker's documented defaults (milliseconds), restored after a test lowers them
CONSUMER_TIMEOUT_DEFAULT = "1800000"
CHANNEL_TICK_DEFAULT = "60000"


def _rabbit_env() -> tuple[str, str]:
    """The broker's current consumer_timeout and channel_tick_interval (milliseconds)."""
    out = rabbitmqctl(
        "eval",
        "{application:get_env(rabbit, consumer_timeout), "
        "application:get_env(rabbit, channel_tick_interval)}.",
    )
    found = re.fullmatch(r"\{\{ok,(\d+)\},\{ok,(\d+)\}\}", out.strip())
    if found is None:
        raise RuntimeError(f"unexpected rabbit settings: {out!r}")
    return found.group(1), found.group(2)


def _set_rabbit_env(timeout_ms: str, tick_ms: str) -> None:
    rabbitmqctl(
        "eval",
        f"application:set_env(rabbit, consumer_timeout, {timeout_ms}), "
        f"application:set_env(rabbit, channel_tick_interval, {tick_ms}).",
    )


@contextlib.contextmanager
def consumer_timeout(ms: int, tick_ms: int = 500) -> Iterator[None]:
    """Lower the broker's consumer timeout (and the channel tick that checks it) for
    channels opened inside the block; restore the documented defaults in a finally
    (checked), also when a failed run before this one left them lowered. Only a test
    marked `broker_settings` may: it holds the broker alone (tests/broker_lock.py)."""
    if not broker_lock.exclusive_held():
        raise RuntimeError(
            "consumer_timeout() lowers a broker-wide setting: mark the test "
            "@pytest.mark.broker_settings so that no other RabbitMQ test runs meanwhile"
        )
    try:
        _set_rabbit_env(str(ms), str(tick_ms))
        yield
    finally:
        _set_rabbit_env(CONSUMER_TIMEOUT_DEFAULT, CHANNEL_TICK_DEFAULT)
        restored = _rabbit_env()
        assert restored == (CONSUMER_TIMEOUT_DEFAULT, CHANNEL_TICK_DEFAULT), restored


#: queue names tests use under their prefix; the prefix fixture deletes them all
TEST_QUEUES = ("default", "dead-letter", "other", "long")


@pytest.fixture
def prefix(rabbit_url: str) -> Iterator[str]:
    """A unique broker name prefix; its queues and dead-letter exchange are deleted after."""
    name = f"jobfsm.t{uuid.uuid4().hex[:10]}."
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        channel = conn.channel()
        for queue in TEST_QUEUES:
            channel.queue_delete(f"{name}{queue}")
        channel.exchange_delete(f"{name}dead-letter")
    finally:
        conn.close()


def ready_count(rabbit_url: str, queue: str) -> int:
    """Messages ready (not delivered to a consumer) in a broker queue."""
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def raw_channel(rabbit_url: str) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    return conn, conn.channel()


def drain_queue(rabbit_url: str, queue: str) -> list[tuple[Any, bytes]]:
    """Every message now in `queue` as (properties, body), acked."""
    conn, channel = raw_channel(rabbit_url)
    out = []
    try:
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((props, body))
    finally:
        conn.close()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `predicate` every 50 ms; return the seconds it took or fail naming `what`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


class FencedEffects:
    """The outside world of a handler: an effect commits only under the job's current fence."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self.committed: dict[str, list[int]] = {}

    def commit(self, job_id: str, fence: int) -> None:
        with self._lock:
            job = self._engine.get(job_id)
            if job.fence != fence or job.state != "running":
                raise LeaseLost(job_id, job.state, "effect", fence, job.fence)
            self.committed.setdefault(job_id, []).append(fence)


class DriverLoop:
    """A minimal worker: poll wake-ups, claim their ids, settle, run no-op handlers."""

    def __init__(
        self,
        engine: Engine,
        delivery: RabbitDelivery,
        queues: tuple[str, ...] = ("default",),
        capacity: int = 16,
        handler: Callable[[Job], None] | None = None,
    ) -> None:
        self.engine = engine
        self.delivery = delivery
        self.queues = queues
        self.capacity = capacity
        self.handler = handler
        self.owner = Owner("test-host", 1, uuid.uuid4().hex)
        self.effects = FencedEffects(engine)
        self.not_claimable = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver", daemon=True)

    def start(self) -> DriverLoop:
        self.delivery.start(self.queues)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wakeups = self.delivery.poll(self.capacity, 0.2)
                if not wakeups:
                    continue
                ids = [w.job_id for w in wakeups if w.job_id is not None]
                leased = self.engine.claim(self.owner, self.queues, len(ids), ids=ids)
                for wakeup in wakeups:
                    self.delivery.settle(wakeup)
                self.not_claimable += len(wakeups) - len(leased)
                for job in leased:
                    running = self.engine.start(job.id, job.fence)
                    if self.handler is not None:
                        self.handler(running)
                    self.effects.commit(job.id, job.fence)
                    self.engine.succeed(job.id, job.fence)
        except BaseException as err:  # surfaced by the test through `error`
            self.error = err

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def memory_engine() -> Engine:
    return Engine(MemoryStore())


def stored_job(engine: Engine, **changes: Any) -> Job:
    """A queued job written straight into the store, bypassing submit's checks: the rows an
    older version or another submitter may have left (an over-long correlation id, ...)."""
    now = engine.clock.now()
    job = Job(
        id=uuid.uuid4().hex,
        kind="noop",
        queue="default",
        payload_json="null",
        state="queued",
        created_at=now,
        updated_at=now,
        run_after=now,
    )
    job = attrs.evolve(job, **changes)
    engine.store.insert([Decision(job=job, entry=None, event="submit", previous=None)])
    return job


def delete_broker_names(rabbit_url: str, prefix: str, queues: tuple[str, ...]) -> None:
    """Delete queues `<prefix><queue>` and the dead-letter pair of a prefix the fixture
    does not know (a test that needs a second prefix)."""
    conn = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        channel = conn.channel()
        for queue in (*queues, "dead-letter"):
            channel.queue_delete(f"{prefix}{queue}")
        channel.exchange_delete(f"{prefix}dead-letter")
    finally:
        conn.close()
