"""JSON across every process and network boundary: encoding with explicit limits."""

from __future__ import annotations

import json
from typing import Any

from .errors import PayloadError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


def encode(value: Any, *, what: str = "payload", limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Canonical JSON text of `value`, or PayloadError naming what is wrong."""
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise PayloadError(f"{what} is not JSON-serializable: {err}") from err
    size = len(text.encode("utf-8"))
    if size > limit:
        raise PayloadError(f"{what} is {size} bytes, over the limit of {limit} bytes")
    return text


def decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)
