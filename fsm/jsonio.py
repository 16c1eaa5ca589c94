"""JSON across every process and network boundary: encoding with explicit limits.

Two bounds hold on every path, encode and decode alike: the size in bytes
(`limit`, the payload limit by default) and the nesting depth (`MAX_DEPTH`): a
2 KB payload nested a thousand deep would otherwise exhaust Python's recursion
limit wherever it is decoded (a worker, a broker consumer, the CLI).
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Callable
from typing import Any

from .errors import PayloadError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: deepest nesting of arrays and objects accepted anywhere
MAX_DEPTH = 64

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


_JSON_SCALARS = (str, int, float, bool, type(None))


def _unencodable(value: Any) -> str | None:
    """Where in `value` the first value JSON cannot hold is (`['when']`, `[2]`), and what;
    None if there is none (a cycle: each container is walked once, so the walk ends)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    walked: set[int] = set()
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict | list | tuple):
            if id(item) in walked:
                continue
            walked.add(id(item))
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{path or 'the top level'} has a key {key!r} that is not a string"
                stack.append((child, f"{path}[{key!r}]"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{path or 'the value'} is {item!r}, which JSON cannot hold"
        elif not isinstance(item, _JSON_SCALARS):
            hint = " (convert it first, e.g. .isoformat() or str())"
            return f"{path or 'the value'} is a {type(item).__name__}, not JSON{hint}"
    return None


def text_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub('""', text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _refuse_default(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder(default: Callable[[Any], Any], allow_nan: bool) -> Any:
    """The C core of `json.dumps(value, separators=(",", ":"), sort_keys=True, ...)`,
    built once: `dumps` with any argument builds a new encoder per call, most of the
    cost of a small document (every result, payload and audit entry). It keeps no
    markers, so a cycle surfaces as RecursionError; on any error the caller lets
    `json.dumps` itself say what is wrong."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    return make(
        None,  # markers: none (see above)
        default,
        json.encoder.encode_basestring_ascii,
        None,  # indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        allow_nan,
    )


#: payloads and results: nothing beyond JSON's own types, no NaN or infinity
_C_STRICT: Any = _c_encoder(_refuse_default, allow_nan=False)
#: audit entries' data: what JSON cannot hold is written as its str()
_C_LENIENT: Any = _c_encoder(str, allow_nan=True)


def canonical(value: Any, *, lenient: bool = False) -> str:
    """The canonical JSON text of `value` (sorted keys, no spaces, ASCII). Strict: only
    JSON's own types, finite numbers (TypeError / ValueError otherwise). `lenient` (an
    audit entry's data, which must never fail to be written): a value JSON cannot hold
    is written as its `str()`, and NaN and infinities as JavaScript's names."""
    if value is None:
        return "null"  # a handler's usual result
    fast = _C_LENIENT if lenient else _C_STRICT
    if fast is not None:
        try:
            return "".join(fast(value, 0))
        except (RecursionError, TypeError, ValueError):
            pass  # json.dumps raises the error that names the problem (or, lenient, copes)
    if lenient:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def encode(value: Any, *, what: str = "payload", limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Canonical JSON text of `value`, or PayloadError naming what is wrong."""
    try:
        text = canonical(value)
    except RecursionError as err:
        raise PayloadError(f"{what} nests deeper than {MAX_DEPTH} levels") from err
    except (TypeError, ValueError) as err:
        detail = _unencodable(value) or str(err)
        raise PayloadError(f"{what} is not JSON-serializable: {detail}") from err
    size = len(text)  # ASCII: json.dumps escapes every other character
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes, over the limit of {limit} bytes")
    if _may_be_deep(text) and text_depth(text) > MAX_DEPTH:
        raise PayloadError(f"{what} nests deeper than {MAX_DEPTH} levels")
    return text


def _may_be_deep(text: str) -> bool:
    """Whether `text` holds enough brackets to nest past MAX_DEPTH (a cheap C-speed count
    that spares most documents the full scan)."""
    return text.count("[") + text.count("{") > MAX_DEPTH


#: the texts most payloads and results are, decoded without the parser
_CONSTANTS: dict[str, Callable[[], Any]] = {
    "null": lambda: None,
    "{}": dict,
    "[]": list,
    "true": lambda: True,
    "false": lambda: False,
}


def decode(text: str | None, *, what: str = "JSON") -> Any:
    """The value of JSON text, or PayloadError if it is not JSON or nests too deep."""
    if text is None:
        return None
    constant = _CONSTANTS.get(text)
    if constant is not None:
        return constant()  # a new object each time: callers may change what they get
    if _may_be_deep(text) and text_depth(text) > MAX_DEPTH:
        raise PayloadError(f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise PayloadError(f"{what} is not valid JSON: {err}") from err
