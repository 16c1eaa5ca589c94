"""A fault model for the RabbitMQ delivery, run against a real broker.

`AmqpFaultModel` drives one `RabbitDelivery` (with an engine) through a list of faults
while a small worker loop polls, claims, settles and runs jobs, and checks the delivery's
promises:

- no wake-up is acked before its lease commits: every delivery an ack covers (one by one,
  or all up to a tag with `multiple`) was settled by the worker after its claim returned;
- no job is lost: once the faults stop, every submitted job succeeds (lost wake-ups are
  republished by the repair sweep);
- no job runs twice: each job's handler ran exactly once, under one fence;
- liveness (liveness.py): each committed job is leased within `LIVENESS_BOUND` seconds
  of its commit or of the broker's return after a fault, whichever is later: a wake-up
  whose publish failed is republished by the next repair sweep, not `repair_after` later;
- recovery: each failure of the consumer's connection costs exactly one recovery
  attempt (a reconnect that a balancer closes before any byte included), and no
  recovery uses more than `recovery_attempts`.

Wake-ups come in both message formats: `submit` and `reorder` publish multi-job
(version-2) messages, `batch` one message naming more jobs than the worker's free slots
(its ids wait for later polls; the message is acked only once every one is settled),
`old_format` one-job (version-1) messages as an old publisher sends them.

Faults: `submit` (a few new jobs), `batch` (12 new jobs in one message, more than the 8
slots of a poll), `old_format` (3 new jobs, one version-1 message each), `duplicate`
(wake-ups published again for jobs that exist, finished or not), `reorder` (a batch of
wake-ups in shuffled order), `close_connections` (the broker closes the run's
connections, as an operator's close does: reply 320, CONNECTION_FORCED), `close_channel`
(the consumer's channel closes under it), `backend_down` (a balancer whose backend is
down closes each reconnect before any byte), `publish_outage` (the broker is down while
jobs are committed: the outbox's publish of their wake-ups fails), `partition` (a short
silent partition, under the heartbeat's timeout, while jobs are committed),
`slow_store` (the next claims take 0.3 s: an ack sent before the lease would reach the
broker first), `late_settle` (the worker settles the wake-ups of the first message of its
next batches one round after the others, as a worker whose claims finish out of order
does), `pause` (time passes).

The model watches the consumer's I/O thread through `Consumer.watch` (new channels,
arrivals, dead-letterings), so it lives beside the adapter; `fsm` imports none of it.

The broker may be shared (a staging broker, a developer's): the model acts only on the
connections of its own run. Its delivery connects through a `Relay` (relay.py), and
`close_connections` closes the connections passing through that relay, no other;
queues and exchanges carry the run's own prefix and are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from fsm.ports import Wakeup
from fsm.records import Job, Owner
from fsm.service.engine import Engine

from .consumer import Consumer
from .delivery import RabbitDelivery
from .liveness import LIVENESS_BOUND, REPAIR_AFTER, Liveness
from .parts import Part
from .publisher import Publisher
from .relay import Relay
from .settling import Token

FAULTS = (
    "submit",
    "batch",
    "old_format",
    "duplicate",
    "reorder",
    "close_connections",
    "backend_down",
    "publish_outage",
    "partition",
    "close_channel",
    "slow_store",
    "late_settle",
    "pause",
)
#: how long a claim takes under the `slow_store` fault, and for how many claims
SLOW_CLAIM = 0.3
SLOW_CLAIMS = 3
#: jobs of the `batch` fault's one message: more than the worker loop's 8 slots per poll
BATCH_JOBS = 12
#: longest wait, under the `backend_down` fault, for a reconnect the relay refuses
BACKEND_DOWN_WAIT = 10.0
#: the worker loop's slots per poll
POLL_CAPACITY = 8
#: seconds the `publish_outage` fault keeps the broker down after the publish failed: a
#: few repair sweeps (`repair_interval` 0.5 s) fail meanwhile
OUTAGE = 1.5
#: seconds of the `partition` fault: well under the heartbeat's timeout (nothing closes)
PARTITION = 1.5


@attrs.define
class FaultReport:
    """What a run did and what it found; `violations` is empty when every promise held."""

    faults: Counter[str] = attrs.field(factory=Counter)
    jobs: int = 0
    runs: Counter[str] = attrs.field(factory=Counter)
    acked: int = 0
    redelivered: int = 0
    #: wake-ups whose publish by the outbox failed (the `publish_outage` fault)
    publish_failed: int = 0
    #: the liveness bound checked, and the slowest lease against it (seconds)
    liveness_bound: float = LIVENESS_BOUND
    slowest_lease: float = 0.0
    violations: list[str] = attrs.field(factory=list)

    def check(self) -> None:
        if self.violations:
            raise AssertionError("RabbitMQ fault model: " + "; ".join(self.violations[:10]))


class _AckAudit:
    """Records deliveries, settles and acks of one consumer, keyed by (generation, tag).

    It watches the consumer's I/O thread (`Consumer.watch`): every delivery as it
    arrives, every dead-lettering (its ack needs no lease), and every ack and nack of
    each new channel (it wraps the channel's `basic_ack` and `basic_nack`, so an ack
    the consumer sends by any path is checked)."""

    def __init__(self, consumer: Consumer, report: FaultReport) -> None:
        self._report = report
        self._lock = threading.Lock()
        self._unacked: set[tuple[int, int]] = set()
        self._settled: set[tuple[int, int]] = set()
        self._parts: dict[tuple[int, int], set[int]] = {}
        #: the consumer's connection and channel (for the close_channel fault)
        self.session: tuple[Any, Any] | None = None
        consumer.watch = self

    def opened(self, connection: Any, channel: Any, generation: int) -> None:
        self.session = (connection, channel)
        basic_ack, basic_nack = channel.basic_ack, channel.basic_nack

        def audited_ack(delivery_tag: int = 0, multiple: bool = False) -> None:
            self._on_ack(generation, delivery_tag, multiple)
            basic_ack(delivery_tag, multiple=multiple)

        def audited_nack(
            delivery_tag: int = 0, multiple: bool = False, requeue: bool = True
        ) -> None:
            with self._lock:  # given back (or dead-lettered): no longer ours to ack
                self._unacked.discard((generation, delivery_tag))
            basic_nack(delivery_tag, multiple=multiple, requeue=requeue)

        channel.basic_ack = audited_ack
        channel.basic_nack = audited_nack

    def received(self, generation: int, method: Any) -> None:
        with self._lock:
            self._unacked.add((generation, method.delivery_tag))
            if method.redelivered:
                self._report.redelivered += 1

    def dead_lettering(self, token: Token) -> None:
        self.settled(token.generation, token.tag)  # poison: its ack needs no lease

    def settled(self, generation: int, tag: int) -> None:
        with self._lock:
            self._settled.add((generation, tag))

    def settled_part(self, part: Part) -> None:
        """One id of a multi-job message settled; the message is settled with its last."""
        key = (part.message.generation, part.message.tag)
        with self._lock:
            done = self._parts.setdefault(key, set())
            done.add(part.at)
            if len(done) == part.of:
                self._settled.add(key)

    def _on_ack(self, generation: int, tag: int, multiple: bool) -> None:
        with self._lock:
            covered = {
                key
                for key in self._unacked
                if key[0] == generation and (key[1] <= tag if multiple else key[1] == tag)
            }
            for key in sorted(covered - self._settled):
                self._report.violations.append(
                    f"delivery tag {key[1]} of channel generation {key[0]} was acked "
                    f"(ack of tag {tag}, multiple={multiple}) before its lease was settled"
                )
            self._unacked -= covered
            self._report.acked += len(covered)


class AmqpFaultModel:
    """One delivery, one engine, one worker loop, and the faults applied between them.

    The delivery connects through `relay` (`RabbitDelivery(relay.url, engine=engine)`):
    the connection faults act on the relay's connections only. The relay is the model's:
    `run()` closes it."""

    def __init__(
        self,
        engine: Engine,
        delivery: RabbitDelivery,
        *,
        relay: Relay,
        queue: str = "default",
        seed: int = 0,
    ) -> None:
        if delivery.engine is not engine:
            raise ValueError("the fault model needs RabbitDelivery(engine=engine)")
        if delivery.config.url != relay.url:
            raise ValueError(
                "the fault model needs its delivery connected through its relay: "
                "RabbitDelivery(relay.url, ...)"
            )
        self.engine = engine
        self.delivery = delivery
        self.relay = relay
        self.queue = queue
        self.report = FaultReport()
        self._rng = random.Random(seed)
        self._audit = _AckAudit(delivery.consumer, self.report)
        self._owner = Owner("fault-model", 1, uuid.uuid4().hex)
        self._jobs: list[Job] = []
        self._fences: dict[str, set[int]] = {}
        self._liveness = Liveness()
        self._slow_claims = 0
        self._late_settles = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="fault-model-worker", daemon=True)

    # --- running -----------------------------------------------------------------------

    def start(self) -> None:
        self.engine.publisher = self.delivery
        self.delivery.start([self.queue])
        self._thread.start()

    def run(self, faults: Sequence[str], *, settle_timeout: float = 60.0) -> FaultReport:
        """Apply `faults` in order, then wait for every job to finish, and check."""
        self.start()
        try:
            for fault in faults:
                self.apply(fault)
            self._finish(settle_timeout)
        finally:
            self._stop.set()
            self.delivery.wake()
            self._thread.join(30)
            self.delivery.close()
            self.relay.close()
        if self._error is not None:
            self.report.violations.append(f"the worker loop failed: {self._error!r}")
        return self.report

    def apply(self, fault: str) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown RabbitMQ fault {fault!r}; known: {FAULTS}")
        self.report.faults[fault] += 1
        getattr(self, f"_fault_{fault}")()

    # --- the faults --------------------------------------------------------------------

    def _fault_submit(self) -> None:
        jobs = self.engine.submit_many(
            [("noop", {"n": len(self._jobs) + i}, {"queue": self.queue}) for i in range(3)]
        )
        self._liveness.committed(j.id for j in jobs)
        with self._lock:
            self._jobs.extend(jobs)

    def _known(self, count: int) -> list[Job]:
        with self._lock:
            jobs = list(self._jobs)
        return [self._rng.choice(jobs) for _ in range(count)] if jobs else []

    def _unannounced(self, count: int) -> list[Job]:
        """`count` new jobs submitted without a wake-up (the fault publishes its own)."""
        publisher, self.engine.publisher = self.engine.publisher, None
        try:
            jobs = self.engine.submit_many(
                [("noop", {"n": len(self._jobs) + i}, {"queue": self.queue}) for i in range(count)]
            )
        finally:
            self.engine.publisher = publisher
        self._liveness.committed(j.id for j in jobs)
        with self._lock:
            self._jobs.extend(jobs)
        return jobs

    def _fault_batch(self) -> None:
        self.delivery.publish(self._unannounced(BATCH_JOBS), wait=True)

    def _fault_old_format(self) -> None:
        # a publisher with wakeup_ids=1 sends what publishers before version 2 sent
        old = Publisher(attrs.evolve(self.delivery.config, wakeup_ids=1))
        try:
            old.publish(self._unannounced(3))
        finally:
            old.close()

    def _fault_duplicate(self) -> None:
        for job in self._known(3):
            self.delivery.publish([job], wait=False)

    def _fault_reorder(self) -> None:
        jobs = self._known(5)
        self._rng.shuffle(jobs)
        self.delivery.publish(jobs, wait=False)

    def _fault_close_connections(self) -> None:
        self._wait_ready(30)  # a consumer still connecting has no connection to close yet
        before = self.delivery.consumer.generation
        with self._disturbance():
            self.relay.force_close()
            self._wait_ready(30, after=before)  # it sees the close and comes back

    def _fault_backend_down(self) -> None:
        """A balancer whose backend is down: connections closed, one reconnect accepted
        and closed before any byte (a failed recovery attempt, never the end), then back."""
        self._wait_ready(30)
        consumer = self.delivery.consumer
        before = consumer.generation
        refused = consumer.stats["failure:incompatible-protocol"]
        with self._disturbance(), self.relay.backend_down():
            deadline = time.monotonic() + BACKEND_DOWN_WAIT
            while (
                consumer.stats["failure:incompatible-protocol"] == refused
                and consumer.failure is None
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
        self._wait_ready(30, after=before)

    def _fault_publish_outage(self) -> None:
        """The broker is down while jobs are committed: the outbox's publish of their
        wake-ups fails (its retry too), and so do the repair sweeps that run while it is
        down; then it is back, and the repair sweep must
        republish them within the liveness bound, not `repair_after` later."""
        self._wait_ready(30)
        outbox = self.delivery.outbox
        failed = outbox.failed
        with self._disturbance(), self.relay.outage():
            self._fault_submit()
            outbox.flush(self.delivery.config.publish_timeout)
            time.sleep(OUTAGE)  # repair sweeps run and fail meanwhile
        self.report.publish_failed += outbox.failed - failed

    def _fault_partition(self) -> None:
        """A silent partition shorter than the heartbeat's timeout while jobs are
        committed: nothing is closed, and their wake-ups arrive once it heals."""
        self._wait_ready(30)
        with self._disturbance(), self.relay.partition():
            self._fault_submit()
            time.sleep(PARTITION)

    @contextlib.contextmanager
    def _disturbance(self) -> Iterator[None]:
        """A fault that keeps the broker away: leases are judged from its start and its
        end (liveness), and the consumer's recovery from it is checked: each failure of
        its connection cost exactly one attempt, and no more than `recovery_attempts`."""
        consumer = self.delivery.consumer
        attempts, failures = consumer.stats["recovery_attempts"], _failures(consumer)
        self._liveness.disturbed()
        try:
            yield
        finally:
            self._liveness.disturbed()
        self._wait_ready(30)
        if consumer.failure is not None or not self.delivery.ready:
            return  # reported as a lost delivery (A2) when the run ends
        used = consumer.stats["recovery_attempts"] - attempts
        seen = _failures(consumer) - failures
        most = self.delivery.config.recovery_attempts
        if used != seen or used > most:
            self.report.violations.append(
                f"the consumer's recovery took {used} attempt(s) for {seen} connection "
                f"failure(s) (each must cost exactly one; recovery_attempts={most})"
            )

    def _fault_close_channel(self) -> None:
        if self._audit.session is None:
            return
        conn, channel = self._audit.session
        try:
            conn.add_callback_threadsafe(lambda: channel.is_open and channel.close())
        except Exception:  # the connection is already gone: a fault of its own
            return
        self._wait_ready(30)

    def _fault_slow_store(self) -> None:
        self._slow_claims = SLOW_CLAIMS
        time.sleep(SLOW_CLAIM * SLOW_CLAIMS)

    def _fault_late_settle(self) -> None:
        self._late_settles = 2

    def _fault_pause(self) -> None:
        time.sleep(0.3)

    # --- the worker --------------------------------------------------------------------

    def _work(self) -> None:
        held: list[Wakeup] = []
        try:
            while not self._stop.is_set():
                wakeups = self.delivery.poll(POLL_CAPACITY, 0.2)
                late, held = held, []
                messages = {_message(w) for w in wakeups}
                if self._late_settles > 0 and len(messages) >= 2:
                    self._late_settles -= 1
                    first = _message(wakeups[0])
                    held = [w for w in wakeups if _message(w) == first]
                    wakeups = [w for w in wakeups if _message(w) != first]
                for batch in (wakeups, late):
                    if batch:
                        self._handle(batch)
            if held:
                self._handle(held)
        except BaseException as err:  # reported as a violation by run()
            self._error = err

    def _handle(self, wakeups: list[Wakeup]) -> None:
        """Claim the wake-ups' jobs, settle them (the lease is durable), run what was leased."""
        ids = list(dict.fromkeys(w.job_id for w in wakeups if w.job_id is not None))
        if self._slow_claims > 0:
            self._slow_claims -= 1
            time.sleep(SLOW_CLAIM)
        leased = self.engine.claim(self._owner, [self.queue], len(ids), ids=ids)
        leased_ids = {job.id for job in leased}
        self._liveness.leased(leased_ids)
        for wakeup in wakeups:
            token = wakeup.token
            if isinstance(token, Part):
                self._audit.settled_part(token)
            else:
                assert isinstance(token, Token)  # handed out by this model's delivery
                self._audit.settled(token.generation, token.tag)
            self.delivery.settle(wakeup, claimed=wakeup.job_id in leased_ids)
        for job in leased:
            running = self.engine.start(job.id, job.fence)
            self.report.runs[job.id] += 1
            self._fences.setdefault(job.id, set()).add(running.fence)
            self.engine.succeed(job.id, running.fence)

    # --- checks ------------------------------------------------------------------------

    def _wait_ready(self, timeout: float, after: int | None = None) -> None:
        """Until the delivery is ready (on a generation past `after`, when given)."""
        deadline = time.monotonic() + timeout
        consumer = self.delivery.consumer
        while time.monotonic() < deadline and not (
            self.delivery.ready and (after is None or consumer.generation > after)
        ):
            if self.delivery.consumer.failure is not None:
                return
            time.sleep(0.05)

    def _finish(self, timeout: float) -> None:
        with self._lock:
            jobs = list(self._jobs)
        self.report.jobs = len(jobs)
        deadline = time.monotonic() + timeout
        pending = [j.id for j in jobs]
        while pending and time.monotonic() < deadline and self._error is None:
            pending = [i for i in pending if self.engine.get(i).state != "succeeded"]
            if pending:
                time.sleep(0.1)
        for job_id in pending:
            state = self.engine.get(job_id).state
            self.report.violations.append(f"job {job_id} was lost: still {state} after {timeout} s")
        for job in jobs:
            runs = self.report.runs[job.id]
            if runs > 1:
                fences = sorted(self._fences.get(job.id, ()))
                self.report.violations.append(f"job {job.id} ran {runs} times (fences {fences})")
        failure = self.delivery.consumer.failure
        if failure is not None:
            self.report.violations.append(f"the delivery failed for good: {failure}")
        self.report.violations += self._liveness.violations()
        self.report.slowest_lease = self._liveness.slowest


def _failures(consumer: Consumer) -> int:
    """Failures of the consumer's connection so far (its stats count each by kind)."""
    return sum(n for kind, n in dict(consumer.stats).items() if kind.startswith("failure:"))


def _message(wakeup: Wakeup) -> Token:
    """The delivery a wake-up came in (a multi-job message's parts share one)."""
    token = wakeup.token
    if isinstance(token, Part):
        return token.message
    assert isinstance(token, Token)
    return token


__all__ = ["FAULTS", "MODEL_OPTIONS", "AmqpFaultModel", "FaultReport"]


#: fault lists per run of `run_delivery_faults`: always some jobs before and after
_SIZES = {"quick": (2, 6), "default": (6, 10), "thorough": (25, 14)}
#: the delivery options of the model's runs (the tests use them too)
MODEL_OPTIONS: dict[str, Any] = {
    "repair_interval": 0.5,
    "repair_after": REPAIR_AFTER,
    "recovery_interval": 0.5,
}


def _delete_names(url: str, prefix: str, queue: str) -> None:
    """Remove what one run declared on the broker (its queue and dead-letter pair)."""
    pika = __import__("pika")
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        for name in (queue, "dead-letter"):
            channel.queue_delete(f"{prefix}{name}")
        channel.exchange_delete(f"{prefix}dead-letter")
    finally:
        conn.close()


def _promise(violation: str) -> str:
    """The promise a violation breaks, or A0 when the model itself failed: A1 no wake-up
    is acked before its lease commits, A2 no job is lost, A3 no job runs twice, A4 each
    job is leased within the liveness bound, A5 each connection failure costs exactly one
    recovery attempt, within `recovery_attempts`."""
    if "acked" in violation:
        return "A1"
    if "was lost" in violation or "failed for good" in violation:
        return "A2"
    if "times (fences" in violation:
        return "A3"
    if "was leased" in violation:
        return "A4"
    if "recovery took" in violation:
        return "A5"
    return "A0"


def run_delivery_faults(
    url: str,
    *,
    size: str = "default",
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FaultReport:
    """`jobfsm faults --delivery amqp://...`: runs of the model against the broker at
    `url`, each with a random list of faults (seeded), merged into one report.

    Each run uses fresh queue names and deletes them afterwards, and connects through a
    relay of its own, whose connections are the only ones it closes: safe against a
    shared broker. The store is a memory store (the delivery's promises do not depend
    on it).
    """
    from adapters.memory import MemoryStore

    runs, length = _SIZES[size]
    rng = random.Random(seed)
    total = FaultReport()
    for n in range(runs):
        # every run begins with an outage under committed jobs (the liveness bound, A4)
        drawn = rng.choices(FAULTS, k=length)
        faults = ["submit", "publish_outage", *drawn, "submit", "duplicate"]
        prefix = f"jobfsm.faults{uuid.uuid4().hex[:10]}."
        engine = Engine(MemoryStore())
        relay = Relay(url)
        try:
            delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, **MODEL_OPTIONS)
            model = AmqpFaultModel(engine, delivery, relay=relay, seed=rng.randrange(2**32))
            report = model.run(faults)
        finally:
            relay.close()
            _delete_names(url, prefix, "default")
        total.faults.update(report.faults)
        total.jobs += report.jobs
        total.runs.update(report.runs)
        total.acked += report.acked
        total.redelivered += report.redelivered
        total.publish_failed += report.publish_failed
        total.slowest_lease = max(total.slowest_lease, report.slowest_lease)
        total.violations += [
            f"{_promise(v)} run {n + 1} ({', '.join(faults)}): {v}" for v in report.violations
        ]
        if progress is not None:
            progress(n + 1, runs)
        if total.violations:
            break
    return total
