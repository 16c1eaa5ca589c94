"""Bad input at submit: refused with a BadInput naming it, nothing stored.

Each case here once got through or failed with a raw Python error: a payload nested
~1000 deep (it stopped the worker that decoded it), NaN and infinite times (they
blocked claims on PostgreSQL), int64 overflow, correlation ids of any type or
length (they stopped every RabbitMQ publish batch), names ending in a newline,
`retry_safe="no"` stored as true, an empty queue name meaning "default".
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import pytest

from adapters.memory import MemoryStore
from fsm import BadInput, Engine, FakeClock, KindPolicy, PayloadError
from fsm.inputs import INT64_MAX
from fsm.jsonio import MAX_DEPTH, decode
from fsm.ports import ScanRequest


@pytest.fixture
def engine() -> Engine:
    return Engine(MemoryStore(), clock=FakeClock(1_000_000.0), kinds={"k": KindPolicy()})


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _stored(engine: Engine) -> int:
    return len(engine.scan(ScanRequest(states=engine.spec.states, limit=10_000)))


BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"deadline": math.nan}, "deadline"),
    ({"deadline": math.inf}, "deadline"),
    ({"run_after": -math.inf}, "run_after"),
    ({"delay": math.nan}, "delay"),
    ({"delay": -1}, "delay"),
    ({"delay": "5"}, "delay"),
    ({"timeout": math.inf}, "timeout"),
    ({"timeout": 0}, "timeout"),
    ({"priority": 2**63}, "priority"),
    ({"priority": 1.5}, "priority"),
    ({"max_attempts": 2**64}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
    ({"retry_safe": "no"}, "retry_safe"),
    ({"correlation_id": 42}, "correlation_id"),
    ({"correlation_id": "x" * 256}, "correlation_id"),
    ({"correlation_id": "é" * 128}, "correlation_id"),  # 256 bytes in UTF-8
    ({"correlation_id": "line\nbreak"}, "correlation_id"),
    ({"correlation_id": ""}, "correlation_id"),
    ({"queue": ""}, "queue"),
    ({"queue": "mail\n"}, "queue"),
    ({"idempotency_key": "k\x1b[31m"}, "idempotency key"),
    ({"deadline": dt.datetime(2030, 1, 1)}, "naive datetime"),
    ({"run_after": 1.0, "delay": 1.0}, "run_after or delay"),
    ({"colour": "blue"}, "unknown options"),
]


@pytest.mark.parametrize(("opts", "named"), BAD_OPTIONS, ids=lambda v: repr(v)[:40])
def test_a_bad_submit_option_is_refused_by_name_and_nothing_is_stored(
    engine: Engine, opts: dict[str, Any], named: str
) -> None:
    with pytest.raises(BadInput, match=named):
        engine.submit("k", {"n": 1}, **opts)
    assert _stored(engine) == 0


def test_a_batch_with_one_bad_item_stores_nothing(engine: Engine) -> None:
    with pytest.raises(BadInput, match="deadline"):
        engine.submit_many([("k", 1, {}), ("k", 2, {"deadline": math.nan})])
    assert _stored(engine) == 0


@pytest.mark.parametrize("kind", ["mail\n", "", "a b", 7])
def test_a_bad_kind_name_is_refused(engine: Engine, kind: Any) -> None:
    with pytest.raises(BadInput, match="kind"):
        engine.submit(kind, {})


def test_a_payload_nested_past_the_bound_is_refused_before_it_is_stored(engine: Engine) -> None:
    with pytest.raises(PayloadError, match=f"deeper than {MAX_DEPTH}"):
        engine.submit("k", _nested(990))
    assert _stored(engine) == 0
    assert engine.submit("k", _nested(MAX_DEPTH)).payload == _nested(MAX_DEPTH)


def test_decoding_deep_json_text_is_a_payload_error_not_a_recursion_error() -> None:
    with pytest.raises(PayloadError, match="deeper"):
        decode("[" * 5000 + "]" * 5000)
    assert decode('{"a": "[[[[[[[["}') == {"a": "[[[[[[[["}  # brackets in strings don't count


def test_time_arguments_take_timedeltas_and_aware_datetimes(engine: Engine) -> None:
    now = engine.clock.now()
    when = dt.datetime.fromtimestamp(now + 3600, tz=dt.UTC)
    job = engine.submit("k", {}, delay=dt.timedelta(seconds=90), deadline=when)
    assert job.run_after == now + 90
    assert job.deadline == pytest.approx(now + 3600)
    assert engine.submit("k", {}, run_after=now + 5).run_after == now + 5


def test_int64_edges_are_accepted(engine: Engine) -> None:
    job = engine.submit("k", {}, priority=-INT64_MAX, max_attempts=INT64_MAX)
    assert (job.priority, job.max_attempts) == (-INT64_MAX, INT64_MAX)


def test_a_kind_unknown_to_the_submitter_is_stored_fail_closed(engine: Engine) -> None:
    unknown = engine.submit("never.registered", {})
    explicit = engine.submit("never.registered", {}, retry_safe=True)
    known = engine.submit("k", {})
    assert (unknown.retry_safe, explicit.retry_safe, known.retry_safe) == (False, True, True)


def test_kind_policies_are_checked_when_declared() -> None:
    with pytest.raises(BadInput, match="retry_safe"):
        KindPolicy(retry_safe="no")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="timeout"):
        KindPolicy(timeout=math.nan)
    with pytest.raises(BadInput, match="queue"):
        KindPolicy(queue="")


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (
            {"order": {"when": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}},
            "['order']['when'] is a datetime",
        ),
        ([1, {"price": math.inf}], "[1]['price'] is inf"),
        ({"id": {1, 2}}, "['id'] is a set"),
    ],
)
def test_a_payload_json_cannot_hold_is_refused_naming_the_field(
    engine: Engine, payload: Any, where: str
) -> None:
    with pytest.raises(PayloadError, match=re.escape(where)):
        engine.submit("k", payload)
