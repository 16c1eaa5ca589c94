"""The RabbitMQ fault model against the real broker: faults drawn by hypothesis (connection
and channel closes, duplicate and reordered wake-ups), and proof that the model has teeth:
an adapter that acks before the lease, or acks below unsettled deliveries, is caught."""

from __future__ import annotations

import uuid
from collections import Counter, deque
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.memory import MemoryStore
from adapters.rabbitmq import RabbitDelivery
from adapters.rabbitmq.consumer import Consumer
from adapters.rabbitmq.liveness import REPAIR_AFTER
from adapters.rabbitmq.parts import Part, Parts
from adapters.rabbitmq.relay import Relay
from adapters.rabbitmq.settling import Token
from adapters.rabbitmq.testing import FAULTS, MODEL_OPTIONS, AmqpFaultModel
from fsm import Engine

from .helpers import TEST_QUEUES, delete_broker_names

#: the options `jobfsm faults --delivery` runs the model with (repair_after past the
#: liveness bound, so that a wake-up the outbox forgot is found late)
OPTIONS = MODEL_OPTIONS


@pytest.fixture
def fresh(rabbit_url: str) -> Iterator[list[str]]:
    """Prefixes made by one test (one per hypothesis example), deleted after."""
    made: list[str] = []
    yield made
    for prefix in made:
        delete_broker_names(rabbit_url, prefix, TEST_QUEUES)


def _model(rabbit_url: str, made: list[str], seed: int = 0) -> AmqpFaultModel:
    prefix = f"jobfsm.f{uuid.uuid4().hex[:10]}."
    made.append(prefix)
    engine = Engine(MemoryStore())
    relay = Relay(rabbit_url)  # closed by the model's run()
    delivery = RabbitDelivery(relay.url, engine=engine, prefix=prefix, **OPTIONS)
    return AmqpFaultModel(engine, delivery, relay=relay, seed=seed)


@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    faults=st.lists(st.sampled_from(FAULTS), min_size=4, max_size=10).map(
        lambda f: ["submit", *f, "submit", "duplicate"]
    ),
    seed=st.integers(0, 2**16),
)
def test_no_wakeup_is_acked_before_its_lease_and_no_job_is_lost_or_run_twice(
    faults: list[str], seed: int, rabbit_url: str, fresh: list[str]
) -> None:
    report = _model(rabbit_url, fresh, seed).run(faults)
    report.check()
    assert report.jobs >= 6
    assert sum(report.runs.values()) == report.jobs


def test_a_run_with_every_fault_holds_every_promise(rabbit_url: str, fresh: list[str]) -> None:
    faults = ["submit", *FAULTS, "submit", "close_connections", "duplicate", "reorder"]
    report = _model(rabbit_url, fresh).run(faults)
    report.check()
    assert set(report.faults) == set(FAULTS)
    # every job ran (once: check() above); its wake-ups were acked, a message naming
    # many jobs once (so fewer acks than jobs is expected)
    assert set(report.runs) == {job for job, n in report.runs.items() if n == 1}
    assert len(report.runs) == report.jobs
    assert report.acked >= 1


def test_the_model_catches_an_ack_before_the_lease(
    rabbit_url: str, fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broken adapter that acks each wake-up as it hands it out
    take = Consumer.take

    def acking_take(self: Consumer, capacity: int, timeout: float) -> list:
        items = take(self, capacity, timeout)
        for item in items:
            self.ack(item.token)
        return items

    monkeypatch.setattr(Consumer, "take", acking_take)
    # when the model runs, then it reports the early acks
    report = _model(rabbit_url, fresh).run(["submit", "slow_store", "submit", "slow_store"])
    assert any("before its lease was settled" in v for v in report.violations)


def test_the_model_catches_a_multiple_ack_below_unsettled_deliveries(
    rabbit_url: str, fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broken adapter whose batched ack covers every delivery up to the newest tag
    def greedy_ack(self: Consumer, tokens: list[Token]) -> None:
        tags = [t.tag for t in tokens if t.generation == self.generation]
        if tags:
            self._channel.basic_ack(max(tags), multiple=True)

    monkeypatch.setattr(Consumer, "_ack", greedy_ack)
    # when a worker settles wake-ups out of order
    late = ["late_settle", "old_format", "pause"]
    faults = [*late, *late, "late_settle", "batch", "old_format", "pause", "submit"]
    report = _model(rabbit_url, fresh).run(faults)
    # then the acks of unsettled deliveries are reported
    assert any("before its lease was settled" in v for v in report.violations)


def test_jobfsm_faults_runs_the_delivery_model_against_the_broker(rabbit_url: str) -> None:
    # when a user runs the fault suite with a RabbitMQ delivery, at the quick size
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "fsm.cli", "faults", "--store", "memory://", "--quick",
         "--delivery", rabbit_url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # then the delivery's promises were checked and held, and the password is not shown
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no wake-up acked before its lease committed" in done.stdout
    assert "delivery faults" in done.stdout
    assert "guest:guest" not in done.stdout + done.stderr


def test_the_model_catches_a_multi_job_message_acked_before_its_last_job_is_settled(
    rabbit_url: str, fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broken adapter that acks a multi-job message when its first job is settled
    def eager_settle(self: Parts, part: Part) -> Token | None:
        first = part.message not in self._acked
        self._acked.add(part.message)
        return part.message if first else None

    monkeypatch.setattr(Parts, "_acked", set(), raising=False)
    monkeypatch.setattr(Parts, "settle", eager_settle)
    # when messages of 12 jobs are handed out 8 at a time, their claims slow (0.3 s), so
    # the last 4 of each are settled well after the first 8
    faults = ["slow_store", "batch", "pause", "slow_store", "batch", "pause"]
    report = _model(rabbit_url, fresh).run(faults)
    # then the early acks are reported
    assert any("before its lease was settled" in v for v in report.violations)


def test_wake_ups_whose_publish_failed_are_republished_within_the_liveness_bound(
    rabbit_url: str, fresh: list[str]
) -> None:
    # when the broker is down while jobs are committed (their publish fails, and the
    # repair sweeps that run meanwhile fail too), twice
    faults = ["submit", "publish_outage", "submit", "publish_outage", "pause"]
    report = _model(rabbit_url, fresh).run(faults)
    # then every promise held: each job leased within the bound of the broker's return
    report.check()
    assert report.publish_failed >= 6
    assert 0 < report.slowest_lease <= report.liveness_bound < REPAIR_AFTER


def test_the_model_catches_an_outbox_that_forgets_a_failed_publish(
    rabbit_url: str, fresh: list[str]
) -> None:
    # given an outbox that does not keep the ids of a batch whose publish failed
    model = _model(rabbit_url, fresh)
    model.delivery.outbox.lost = deque(maxlen=0)  # the repair sweep keeps the real one
    # when the broker is down while jobs are committed
    report = model.run(["submit", "publish_outage", "pause"])
    # then their leases come late, found by the repair sweep only after repair_after (A4)
    assert report.publish_failed >= 3
    assert any("was leased" in v and "bound 8 s" in v for v in report.violations), report.violations


def test_the_model_catches_a_refused_reconnect_that_costs_no_attempt(
    rabbit_url: str, fresh: list[str]
) -> None:
    # given a consumer whose attempt after a reconnect closed before any byte is not
    # counted (its stats are what counts its recovery attempts)
    class Free(Counter[str]):
        seen = 0

        def __setitem__(self, key: str, value: int) -> None:
            refused = self["failure:incompatible-protocol"]
            if key == "recovery_attempts" and refused > self.seen:
                self.seen = refused  # the attempt after a refused handshake is free
                return
            super().__setitem__(key, value)

    model = _model(rabbit_url, fresh)
    model.delivery.consumer.stats = Free()
    # when a balancer refuses a reconnect
    report = model.run(["submit", "backend_down", "submit"])
    # then the model reports the recovery's attempts out of step with its failures (A5)
    assert any("recovery took" in v for v in report.violations), report.violations
