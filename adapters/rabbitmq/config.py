"""Configuration of the RabbitMQ delivery: every bound explicit, validated at construction."""

from __future__ import annotations

import math
from typing import Any

import attrs

from fsm.errors import BadInput
from fsm.inputs import check_name

from .url import check_url, redact, url_scrub

QUEUE_TYPES = ("classic", "quorum")
#: the longest time setting accepted (one day), so every wait stays a sane bound
MAX_SECONDS = 86_400.0
#: the longest dead-letter TTL accepted (one year)
MAX_DEAD_LETTER_TTL = 365 * 86_400.0


def _seconds(minimum: float, *, strict: bool, maximum: float = MAX_SECONDS) -> Any:
    """A finite int/float (never bool) > minimum (strict) or >= minimum, and <= maximum."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        ok = ok and math.isfinite(value) and value <= maximum
        ok = ok and (value > minimum if strict else value >= minimum)
        if not ok:
            relation = "greater than" if strict else "at least"
            raise BadInput(
                f"RabbitMQ delivery option {attribute.name} must be a finite number {relation} "
                f"{minimum:g} and at most {maximum:g} (seconds), got {value!r}"
            )

    return check


def _integer(minimum: int, maximum: int) -> Any:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise BadInput(
                f"RabbitMQ delivery option {attribute.name} must be an integer from {minimum} "
                f"to {maximum}, got {value!r}"
            )

    return check


#: AMQP's prefetch_count is an unsigned short
_prefetch_range = _integer(1, 65_535)


def _optional_prefetch(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _prefetch_range(inst, attribute, value)


def _queue_type(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in QUEUE_TYPES:
        raise BadInput(
            f"RabbitMQ delivery option queue_type must be one of {QUEUE_TYPES}, got {value!r:.80}"
        )


def _prefix(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    check_name("RabbitMQ queue name prefix", value)


def _flag(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise BadInput(
            f"RabbitMQ delivery option {attribute.name} must be a bool, got {value!r:.80}"
        )


@attrs.frozen
class RabbitConfig:
    """Every option of the RabbitMQ delivery with its default (see docs/rabbitmq.md).

    The URL's scheme is case-insensitive (`AMQP://` is `amqp://`); its password never
    appears in the repr, in errors or in logs.
    """

    url: str = attrs.field(default="amqp://guest:guest@127.0.0.1:5672/%2F", repr=redact)
    #: broker names: queue `<prefix><queue>`, dead letters `<prefix>dead-letter`
    prefix: str = attrs.field(default="jobfsm.", validator=_prefix)
    queue_type: str = attrs.field(default="classic", validator=_queue_type)
    #: False: queues must exist (passive declare); a missing one is a 404, not retried
    declare: bool = attrs.field(default=True, validator=_flag)
    #: unacked deliveries per queue subscription; None: the capacity of the first poll
    prefetch: int | None = attrs.field(default=None, validator=_optional_prefetch)
    #: recovery budget: at most this many reconnection attempts after a loss (or a failed
    #: first connection), waiting `recovery_delay` before each but the first; 0 disables
    recovery_attempts: int = attrs.field(default=15, validator=_integer(0, 1000))
    #: longest wait between two attempts (waits back off from 1 s up to it, jittered)
    recovery_interval: float = attrs.field(default=60.0, validator=_seconds(0, strict=False))
    #: a delivery buffered this long without a free slot is returned to the broker
    max_hold: float = attrs.field(default=60.0, validator=_seconds(0, strict=True))
    #: how often the I/O thread looks for a closed channel while idle
    idle_check: float = attrs.field(default=0.2, validator=_seconds(0, strict=True))
    #: TCP connect / socket / blocked-connection bound, seconds
    connect_timeout: float = attrs.field(default=5.0, validator=_seconds(0, strict=True))
    #: AMQP heartbeat timeout proposed to the broker, seconds (an unsigned short in AMQP):
    #: a silent partition is noticed after heartbeat + 5 to 2 x (heartbeat + 5) seconds;
    #: the default is measured in docs/rabbitmq.md
    heartbeat: int = attrs.field(default=10, validator=_integer(1, 65_535))
    #: reconnect-and-retry rounds of one publish call after a connection loss
    publish_retries: int = attrs.field(default=1, validator=_integer(0, 100))
    #: False: `publish` returns once wake-ups are queued (commits handled by sender threads)
    publish_wait: bool = attrs.field(default=False, validator=_flag)
    #: job ids one wake-up message names at most (version-2 messages); 1: one message per
    #: job in the version-1 format, which workers older than version 2 also read
    wakeup_ids: int = attrs.field(default=64, validator=_integer(1, 256))
    #: wake-up messages published in one AMQP transaction (one durable commit at the broker)
    publish_batch: int = attrs.field(default=100, validator=_integer(1, 10_000))
    #: sender threads, one connection each, for asynchronous publishing
    publisher_threads: int = attrs.field(default=4, validator=_integer(1, 64))
    #: wake-ups queued in memory at most; beyond, they are left to the repair sweep
    outbox_limit: int = attrs.field(default=10_000, validator=_integer(1, 1_000_000))
    #: longest wait for queued wake-ups at close, and for a waiting publish
    publish_timeout: float = attrs.field(default=10.0, validator=_seconds(0, strict=True))
    #: with an engine: dead-letter wake-ups naming a job the store does not know (one read each)
    verify_job_ids: bool = attrs.field(default=True, validator=_flag)
    #: largest message body accepted from the broker; larger is dead-lettered on arrival
    max_message_bytes: int = attrs.field(default=64 * 1024, validator=_integer(64, 16 * 2**20))
    #: the dead-letter queue keeps at most this many messages (the oldest are dropped)
    dead_letter_max_length: int = attrs.field(default=10_000, validator=_integer(1, 10_000_000))
    #: a dead letter is dropped after this many seconds (7 days)
    dead_letter_ttl: float = attrs.field(
        default=7 * 86_400.0, validator=_seconds(0, strict=True, maximum=MAX_DEAD_LETTER_TTL)
    )
    #: repair sweep period (needs an engine), seconds
    repair_interval: float = attrs.field(default=5.0, validator=_seconds(0, strict=True))
    #: a job queued at submit is republished once due this long without a lease
    repair_after: float = attrs.field(default=10.0, validator=_seconds(0, strict=False))
    #: at most this many wake-ups republished per sweep
    repair_batch: int = attrs.field(default=500, validator=_integer(1, 100_000))
    #: at most this many waiting jobs read per sweep
    repair_scan_limit: int = attrs.field(default=1000, validator=_integer(1, 100_000))
    #: False only in tests: settle does not ack (reproduces the consumer-timeout failure)
    ack_on_settle: bool = attrs.field(default=True, validator=_flag)

    def __attrs_post_init__(self) -> None:
        # The scheme is normalised to lower case: pika and the CLI compare it literally.
        object.__setattr__(self, "url", check_url(self.url))

    def queue_name(self, queue: str) -> str:
        return f"{self.prefix}{check_name('queue', queue)}"

    def scrub(self, text: str) -> str:
        """`text` (an error or log message) with every secret of the URL replaced by ***."""
        return url_scrub(text, self.url)

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.prefix}dead-letter"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}dead-letter"
