"""Wake-up messages: small JSON hints about committed jobs. The store stays the truth.

Two formats, both one flat JSON object (docs/rabbitmq.md, "Message format"):

- version 1, one job: `{"job_id": "...", "kind": ..., "fence": ..., "version": ...,
  "correlation_id": ...}` (the hints are optional; `"v": 1` may be present);
- version 2, several jobs: `{"v": 2, "job_ids": ["...", ...]}` with 1 to `MAX_IDS` ids.

A worker reads both (old publishers keep working while workers are upgraded).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeGuard

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
#: the most job ids one wake-up may name (a bound on what one message can ask of a worker)
MAX_IDS = 256
#: message format versions this code reads
VERSIONS = (1, 2)
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


def encode_many(job_ids: Sequence[str]) -> bytes:
    """A version-2 wake-up naming `job_ids` (1 to MAX_IDS of them)."""
    if not 0 < len(job_ids) <= MAX_IDS:
        raise ValueError(f"a wake-up names 1 to {MAX_IDS} jobs, not {len(job_ids)}")
    return json.dumps({"v": 2, "job_ids": list(job_ids)}, separators=(",", ":")).encode("utf-8")


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


def decode(body: bytes, *, limit: int) -> tuple[str, ...]:
    """The job ids `body` names (version 1: one, version 2: several), or PoisonMessage
    naming what is wrong with it.

    Checked in order of cost: size, UTF-8, flatness (a wake-up is one flat JSON object,
    holding at most one array of ids, so anything nested is refused before the parser
    could recurse), JSON, shape. One bad id makes the whole message poison: a message
    is read whole or not at all.
    """
    if len(body) > limit:
        raise PoisonMessage(f"message is {len(body)} bytes, over the limit of {limit}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        reason = f"message is not UTF-8 text ({err.reason} at byte {err.start})"
        raise PoisonMessage(reason) from None
    outside_strings = _JSON_STRING.sub("", text)
    if outside_strings.count("{") > 1 or outside_strings.count("[") > 1:
        raise PoisonMessage("message nests JSON objects or arrays; a wake-up is one flat object")
    try:
        hint = json.loads(text)
    except RecursionError:  # not reachable past the flatness check; kept as a bound
        raise PoisonMessage("message nests JSON too deeply") from None
    except ValueError as err:
        raise PoisonMessage(f"message is not JSON: {err}") from None
    if not isinstance(hint, dict):
        raise PoisonMessage(f"message is JSON {type(hint).__name__}, not an object")
    version = hint.get("v", 1)
    if version not in VERSIONS or isinstance(version, bool):
        raise PoisonMessage(
            f"message format version {version!r:.40} is not known (this worker reads "
            f"{' and '.join(map(str, VERSIONS))})"
        )
    if version == 2:
        return _many(hint)
    job_id = hint.get("job_id")
    if not _valid_id(job_id):
        raise PoisonMessage(f"message has no valid job_id (got {job_id!r:.80})")
    for field, types in _HINT_TYPES.items():
        if field in hint and (not isinstance(hint[field], types) or isinstance(hint[field], bool)):
            raise PoisonMessage(
                f"message field {field!r} is JSON {type(hint[field]).__name__}, "
                f"not {' or '.join(t.__name__ for t in types)}"
            )
    return (job_id,)


def _valid_id(job_id: object) -> TypeGuard[str]:
    return isinstance(job_id, str) and 0 < len(job_id) <= _MAX_ID and job_id.isprintable()


def _many(hint: dict[str, Any]) -> tuple[str, ...]:
    ids = hint.get("job_ids")
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_IDS:
        count = f"{len(ids)} ids" if isinstance(ids, list) else repr(ids)[:80]
        raise PoisonMessage(
            f"version-2 message needs job_ids, a list of 1 to {MAX_IDS} ids (got {count})"
        )
    for n, job_id in enumerate(ids):
        if not _valid_id(job_id):
            raise PoisonMessage(f"version-2 message has an invalid job id at {n} ({job_id!r:.80})")
    return tuple(dict.fromkeys(ids))  # a repeated id is one wake-up
