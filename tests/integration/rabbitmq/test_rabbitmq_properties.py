"""Hypothesis against the RabbitMQ boundary: any bytes are a wake-up or poison with a reason
(never another error), no password survives a URL's redaction or its error, and a real
consumer fed hostile messages dead-letters each once and still wakes ordinary jobs."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.memory import MemoryStore
from adapters.rabbitmq import RabbitConfig, RabbitDelivery
from adapters.rabbitmq.messages import MAX_IDS, PoisonMessage, decode
from fsm import Engine, Owner
from fsm.errors import BadInput

from .helpers import TEST_QUEUES, delete_broker_names, ready_count, wait_until

LIMIT = 64 * 1024

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=30),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
#: objects shaped like wake-ups, with every field drawn from anything JSON
_hint_like = st.fixed_dictionaries(
    {},
    optional={
        "job_id": _json,
        "kind": _json,
        "fence": _json,
        "version": _json,
        "correlation_id": _json,
    },
)
#: objects shaped like version-2 wake-ups: a version and a list of anything (ids mostly)
_many_like = st.fixed_dictionaries(
    {"job_ids": st.lists(st.one_of(st.text(max_size=12), _json_leaf), max_size=300)},
    optional={"v": st.one_of(st.just(2), _json_leaf)},
)
HOSTILE = st.one_of(
    st.binary(max_size=512),
    _json.map(lambda v: json.dumps(v).encode()),
    _hint_like.map(lambda v: json.dumps(v).encode()),
    _many_like.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5_000).map(lambda n: b'{"job_id":"x","a":' + b"{" * n + b"}" * n + b"}"),
    st.integers(LIMIT + 1, LIMIT + 4096).map(lambda n: b" " * n),
    st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@given(HOSTILE)
def test_any_body_is_a_wakeup_with_valid_job_ids_or_poison_with_a_reason(body: bytes) -> None:
    try:
        job_ids = decode(body, limit=LIMIT)
    except PoisonMessage as err:
        reason = err.reason
        assert 0 < len(reason) <= 500
        return
    assert 0 < len(job_ids) <= MAX_IDS
    assert len(set(job_ids)) == len(job_ids)
    for job_id in job_ids:
        assert isinstance(job_id, str)
        assert 0 < len(job_id) <= 200
        assert job_id.isprintable()


MARK_START, MARK_END = "ZQXW", "WXQZ"
_password = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12).map(
    lambda t: f"{MARK_START}{t}{MARK_END}"
)


@given(
    password=_password,
    scheme=st.sampled_from(["amqp", "AMQP", "Amqps", "amqx", ""]),
    encode=st.booleans(),
    where=st.sampled_from(["userinfo", "query", "fragment"]),
    option=st.sampled_from(["password", "ssl_options", "heartbeat", "pass"]),
)
def test_no_password_survives_a_url_repr_or_its_error(
    password: str, scheme: str, encode: bool, where: str, option: str
) -> None:
    secret = quote(password, safe="") if encode else password
    base = f"{scheme}://" if scheme else ""
    if where == "userinfo":
        url = f"{base}guest:{secret}@127.0.0.1:5672/%2F"
    elif where == "query":
        url = f"{base}guest:guest@127.0.0.1:5672/%2F?{option}={secret}"
    else:
        url = f"{base}guest:guest@127.0.0.1:5672/%2F#{secret}"
    try:
        shown = repr(RabbitConfig(url=url))
    except BadInput as err:
        shown = f"{err} {err!r}"
    for marker in (MARK_START, MARK_END, quote(MARK_START), quote(MARK_END)):
        assert marker not in shown, shown


def test_a_consumer_fed_hostile_messages_dead_letters_each_once_and_still_wakes_jobs(
    rabbit_url: str,
) -> None:
    # given one consuming delivery (names of its own, deleted after)
    prefix = f"jobfsm.h{uuid.uuid4().hex[:10]}."
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(rabbit_url, engine=engine, prefix=prefix, prefetch=4)
    engine.publisher = delivery
    delivery.start(["default"])
    owner = Owner("test-host", 1, "incarnation-properties")
    dead = {"expected": 0}

    @settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(bodies=st.lists(HOSTILE, min_size=1, max_size=5))
    def feed(bodies: list[bytes]) -> None:
        # when hostile messages arrive ahead of a real job
        for body in bodies:
            delivery.publisher.publish_raw("default", body)
        job = engine.submit("noop")
        seen: list[Any] = []

        def handle() -> bool:
            for wakeup in delivery.poll(4, 0.1):
                seen.append(wakeup.job_id)
                claimed = engine.claim(owner, ["default"], 1, ids=[wakeup.job_id])
                delivery.settle(wakeup, claimed=bool(claimed))
            return job.id in seen

        wait_until(handle, 15, "the real job behind hostile messages")
        # then each hostile message is dead-lettered once (poison at once, a well-formed
        # wake-up of an unknown job after its check), and nothing is left in the queue
        dead["expected"] += len(bodies)
        wait_until(
            lambda: ready_count(rabbit_url, f"{prefix}dead-letter") == dead["expected"],
            15,
            f"{dead['expected']} dead letters",
        )
        assert ready_count(rabbit_url, f"{prefix}default") == 0
        assert delivery.ready

    try:
        feed()
    finally:
        delivery.close()
        delete_broker_names(rabbit_url, prefix, TEST_QUEUES)
    assert delivery.consumer.stats.get("returned", 0) == 0
