"""Typed payloads (docs/typed-payloads.md): submit validates a payload by its kind's
type and stores plain JSON; every bad payload is a BadInput naming the field, and
nothing is stored. The types are those of tests/integration/worker/typed_app.py, whose
handlers run them through real workers (tests/integration/worker/test_typed_payloads.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from adapters.memory import MemoryStore
from fsm import BadInput, Engine, KindPolicy
from fsm.payloads import from_data
from tests.integration.worker.typed_app import Address, Email, Invoice, handlers

GOOD_EMAIL = {"to": "a@example.com", "subject": "hi"}
GOOD_INVOICE = {"number": 7, "amount": 12.5, "customer": "ACME"}


@pytest.fixture
def engine() -> Engine:
    # the kinds as the worker declares them: one declaration, imported by both
    return Engine(MemoryStore(), kinds=handlers.policies())


def _nothing_stored(engine: Engine) -> None:
    assert engine.counts() == {}


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        # wrong field types
        ({**GOOD_EMAIL, "to": 5}, r"field 'to': .*expected str"),
        ({**GOOD_EMAIL, "attempts": "3"}, r"field 'attempts': .*expected int"),
        ({**GOOD_EMAIL, "attempts": True}, r"field 'attempts': .*expected int"),
        ({**GOOD_EMAIL, "attempts": 1.5}, r"field 'attempts': .*expected int"),
        ({**GOOD_EMAIL, "address": {"city": 1, "zip": "1"}}, r"field 'address.city'"),
        ({**GOOD_EMAIL, "address": "Berlin"}, r"field 'address'"),
        ({**GOOD_EMAIL, "tags": ["a", 2]}, r"field 'tags\[1\]'"),
        # text is no list, though cattrs alone iterates it ("ab" -> ["a", "b"], "" -> [])
        ({**GOOD_EMAIL, "tags": "ab"}, r"field 'tags': .*expected list"),
        ({**GOOD_EMAIL, "tags": ""}, r"field 'tags': .*expected list"),
        ({**GOOD_EMAIL, "tags": {"a": 1}}, r"field 'tags': .*expected list"),
        ({**GOOD_EMAIL, "at": "not a date"}, r"field 'at'"),
        # missing fields
        ({"to": "a@example.com"}, r"field 'subject': required field missing"),
        ({**GOOD_EMAIL, "address": {"city": "B"}}, r"field 'address.zip': required field"),
        # extra fields: an attrs class takes only its fields
        ({**GOOD_EMAIL, "cc": "b@example.com"}, r"extra fields found \(cc\)"),
        # not a mapping at all
        ("a@example.com", r"it must be a Email or a mapping of its fields; got str"),
        (None, r"it must be a Email or a mapping of its fields; got NoneType"),
        # an instance built in code is checked too (attrs checks no types itself)
        (Email(to=5, subject="hi"), r"field 'to'"),  # type: ignore[arg-type]
        # ... to its nested fields: a value where a class belongs, text where a list does
        (Email(to="a", subject="hi", address="Berlin"), r"field 'address'"),  # type: ignore[arg-type]
        (Email(to="a", subject="hi", tags="ab"), r"field 'tags': .*expected list"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_attrs_payload_is_refused_naming_the_field(
    engine: Engine, payload: Any, named: str
) -> None:
    with pytest.raises(BadInput, match=r"payload of 'email.send' does not fit Email: " + named):
        engine.submit("email.send", payload)
    _nothing_stored(engine)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({**GOOD_INVOICE, "number": "seven"}, r"field 'number': Input should be a valid integer"),
        ({**GOOD_INVOICE, "amount": [1]}, r"field 'amount': Input should be a valid number"),
        ({"number": 7, "amount": 1.0}, r"field 'customer': Field required"),
        ({**GOOD_INVOICE, "zz": 1}, r"field 'zz': Extra inputs are not permitted"),
        ([1, 2], r"Input should be a valid dictionary or instance of Invoice"),
    ],
)
def test_a_bad_pydantic_payload_is_refused_naming_the_field(
    engine: Engine, payload: Any, named: str
) -> None:
    with pytest.raises(
        BadInput, match=r"payload of 'invoice.issue' does not fit Invoice: .*" + named
    ):
        engine.submit("invoice.issue", payload)
    _nothing_stored(engine)


def test_one_bad_payload_in_a_batch_stores_none_of_it(engine: Engine) -> None:
    items = [("email.send", GOOD_EMAIL, {}), ("email.send", {**GOOD_EMAIL, "to": 1}, {})]
    with pytest.raises(BadInput, match="field 'to'"):
        engine.submit_many(items)
    _nothing_stored(engine)


def test_a_good_payload_is_stored_as_plain_json(engine: Engine) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = engine.submit(
        "email.send", Email("a@example.com", "hi", address=Address("Berlin", "10115"), at=at)
    )
    stored = json.loads(job.payload_json)
    assert stored == {
        "to": "a@example.com",
        "subject": "hi",
        "attempts": 1,
        "address": {"city": "Berlin", "zip": "10115"},
        "tags": [],
        "at": "2030-01-02T03:04:05+00:00",
    }
    # and reads back as the same value
    assert from_data(Email, stored) == Email(
        "a@example.com", "hi", address=Address("Berlin", "10115"), at=at
    )
    # a mapping is normalized to the same JSON as the instance it describes
    again = engine.submit("email.send", {**GOOD_EMAIL})
    assert json.loads(again.payload_json)["tags"] == []


def test_a_pydantic_model_is_stored_as_its_json(engine: Engine) -> None:
    job = engine.submit("invoice.issue", Invoice(number=7, amount=12.5, customer="ACME"))
    assert json.loads(job.payload_json) == GOOD_INVOICE
    # pydantic's lax mode (the model's policy, not jobfsm's) takes "7" for 7
    lax = engine.submit("invoice.issue", {**GOOD_INVOICE, "number": "7"})
    assert json.loads(lax.payload_json)["number"] == 7


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (dict, "must be an attrs class or a pydantic model"),
        (int, "must be an attrs class or a pydantic model"),
        (Email(to="a", subject="b"), "must be an attrs class or a pydantic model"),
    ],
)
def test_a_payload_type_that_is_not_a_class_of_fields_is_refused(value: Any, named: str) -> None:
    with pytest.raises(BadInput, match=named):
        KindPolicy(payload_type=value)


def test_a_payload_type_a_child_process_cannot_import_is_refused() -> None:
    @attrs.frozen
    class Local:
        n: int

    with pytest.raises(BadInput, match="must be importable by module and name"):
        KindPolicy(payload_type=Local)
