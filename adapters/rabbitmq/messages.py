"""Wake-up messages: small JSON hints about a committed job. The store stays the truth."""

from __future__ import annotations

import json
import re
from typing import Any

from fsm.records import Job

from ._pika import pika

CONTENT_TYPE = "application/json"
REASON_HEADER = "x-jobfsm-reason"
QUEUE_HEADER = "x-jobfsm-queue"
#: a dead-letter reason is cut to this many characters (it quotes broker input)
MAX_REASON = 500
_MAX_ID = 200
#: AMQP short strings (message_id, correlation_id, type, routing keys) hold 255 bytes
MAX_SHORT_STRING = 255
#: a JSON string literal, escapes included
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
#: optional hint fields and the types a well-formed wake-up gives them
_HINT_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "fence": (int,),
    "version": (int,),
    "correlation_id": (str, type(None)),
}


class PoisonMessage(ValueError):
    """A message that cannot be a wake-up; `reason` goes into the dead-letter header."""

    def __init__(self, reason: str) -> None:
        self.reason = reason[:MAX_REASON]
        super().__init__(self.reason)


def encode(job: Job) -> bytes:
    """The wake-up body: job id, kind, fence, version and correlation id (hints only)."""
    hint = {
        "job_id": job.id,
        "kind": job.kind,
        "fence": job.fence,
        "version": job.version,
        "correlation_id": job.correlation_id,
    }
    return json.dumps(hint, separators=(",", ":")).encode("utf-8")


def id_only(job_id: str) -> bytes:
    """A body naming only a job id (what the unknown-job check dead-letters)."""
    return json.dumps({"job_id": job_id}, separators=(",", ":")).encode("utf-8")


def short_string_problem(name: str, value: object) -> str | None:
    """Why `value` cannot be the AMQP short-string property `name`, or None if it can."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{name} is a {type(value).__name__}, not a string"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{name} is not valid UTF-8 text (it holds a lone surrogate)"
    if size > MAX_SHORT_STRING:
        return f"{name} is {size} bytes, over AMQP's {MAX_SHORT_STRING}-byte limit"
    return None


def dead_letter_properties(reason: str, queue_name: str) -> Any:
    return pika.BasicProperties(
        delivery_mode=pika.DeliveryMode.Persistent,
        headers={REASON_HEADER: reason[:MAX_REASON], QUEUE_HEADER: queue_name},
    )


def decode(body: bytes, *, limit: int) -> dict[str, Any]:
    """The hint in `body`, or PoisonMessage naming what is wrong with it.

    Checked in order of cost: size, UTF-8, flatness (a wake-up is one flat JSON object,
    so anything nested is refused before the parser could recurse), JSON, shape.
    """
    if len(body) > limit:
        raise PoisonMessage(f"message is {len(body)} bytes, over the limit of {limit}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        reason = f"message is not UTF-8 text ({err.reason} at byte {err.start})"
        raise PoisonMessage(reason) from None
    outside_strings = _JSON_STRING.sub("", text)
    if outside_strings.count("{") + outside_strings.count("[") > 1:
        raise PoisonMessage("message nests JSON objects or arrays; a wake-up is one flat object")
    try:
        hint = json.loads(text)
    except RecursionError:  # not reachable past the flatness check; kept as a bound
        raise PoisonMessage("message nests JSON too deeply") from None
    except ValueError as err:
        raise PoisonMessage(f"message is not JSON: {err}") from None
    if not isinstance(hint, dict):
        raise PoisonMessage(f"message is JSON {type(hint).__name__}, not an object")
    job_id = hint.get("job_id")
    if not isinstance(job_id, str) or not 0 < len(job_id) <= _MAX_ID or not job_id.isprintable():
        raise PoisonMessage(f"message has no valid job_id (got {job_id!r:.80})")
    for field, types in _HINT_TYPES.items():
        if field in hint and (not isinstance(hint[field], types) or isinstance(hint[field], bool)):
            raise PoisonMessage(
                f"message field {field!r} is JSON {type(hint[field]).__name__}, "
                f"not {' or '.join(t.__name__ for t in types)}"
            )
    return hint
