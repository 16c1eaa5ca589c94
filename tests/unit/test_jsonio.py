"""fsm.jsonio's shortcuts (a prebuilt C encoder, constant texts decoded without the
parser) give exactly what `json.dumps` / `json.loads` give, and the same errors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm import PayloadError
from fsm.jsonio import MAX_DEPTH, decode, encode


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_VALUES)
def test_encode_is_canonical_json_dumps(value: Any) -> None:
    """Invariant: encode(v) == json.dumps(v, separators=(",", ":"), sort_keys=True,
    allow_nan=False) for every JSON value (tuples included), and decodes back to it."""
    assert encode(value) == _dumps(value)
    assert decode(encode(value)) == json.loads(_dumps(value))


@pytest.mark.parametrize("value", [{2: "int key", 1: "another"}, {True: 1}, {None: 1}])
def test_non_string_keys_are_converted_as_dumps_converts_them(value: Any) -> None:
    assert encode(value) == _dumps(value)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": math.nan}, "['a'] is nan, which JSON cannot hold"),
        ([1, math.inf], "[1] is inf, which JSON cannot hold"),
        ({"when": object()}, "['when'] is a object, not JSON"),
        ({1: 1, "a": 2}, "not JSON-serializable"),  # mixed keys cannot be sorted
    ],
)
def test_unencodable_values_are_refused_naming_the_place(value: Any, says: str) -> None:
    with pytest.raises(PayloadError, match="not JSON-serializable") as err:
        encode(value, what="result of job j")
    assert "result of job j" in str(err.value)
    assert says in str(err.value)


def test_a_cycle_is_refused_as_a_cycle() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(PayloadError, match="Circular reference"):
        encode(loop)


def test_nesting_past_the_bound_is_refused_both_ways() -> None:
    deep: Any = 0
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(PayloadError, match=f"nests deeper than {MAX_DEPTH}"):
        encode(deep)
    with pytest.raises(PayloadError, match=f"nests deeper than {MAX_DEPTH}"):
        decode("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    far: Any = 0
    for _ in range(5_000):  # past Python's recursion limit
        far = [far]
    with pytest.raises(PayloadError, match=f"nests deeper than {MAX_DEPTH}"):
        encode(far)


def test_the_size_limit_holds() -> None:
    with pytest.raises(PayloadError, match="over the limit of 10 bytes"):
        encode("x" * 20, limit=10)
    assert encode(None, limit=4) == "null"


@pytest.mark.parametrize("text", ["null", "{}", "[]", "true", "false"])
def test_constant_texts_decode_as_the_parser_decodes_them(text: str) -> None:
    assert decode(text) == json.loads(text)
    assert type(decode(text)) is type(json.loads(text))


def test_a_decoded_container_is_a_new_object_each_time() -> None:
    first = decode("{}")
    first["changed"] = True
    assert decode("{}") == {}
    listed = decode("[]")
    listed.append(1)
    assert decode("[]") == []


def test_invalid_text_is_refused() -> None:
    with pytest.raises(PayloadError, match="payload of job j is not valid JSON"):
        decode("{nope", what="payload of job j")
