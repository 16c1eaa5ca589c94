"""Configuration of the RabbitMQ delivery: every bound explicit, validated at construction."""

from __future__ import annotations

from typing import Any

import attrs

from fsm.inputs import check_name

QUEUE_TYPES = ("classic", "quorum")


def _number(minimum: float, *, strict: bool) -> Any:
    """An int/float (never bool) that is > minimum (strict) or >= minimum."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        ok = ok and (value > minimum if strict else value >= minimum)
        if not ok:
            relation = "greater than" if strict else "at least"
            raise ValueError(
                f"RabbitMQ delivery option {attribute.name} must be a number {relation} "
                f"{minimum}, got {value!r}"
            )

    return check


def _integer(minimum: int) -> Any:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(
                f"RabbitMQ delivery option {attribute.name} must be an integer of at least "
                f"{minimum}, got {value!r}"
            )

    return check


def _optional_prefetch(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _integer(1)(_inst, attribute, value)


def _queue_type(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in QUEUE_TYPES:
        raise ValueError(f"RabbitMQ queue_type must be one of {QUEUE_TYPES}, got {value!r}")


def _prefix(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    check_name("RabbitMQ queue name prefix", value)


def _flag(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"RabbitMQ delivery option {attribute.name} must be a bool, got {value!r}")


@attrs.frozen
class RabbitConfig:
    """Every option of the RabbitMQ delivery with its default (see docs/rabbitmq.md)."""

    url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    #: broker names: queue `<prefix><queue>`, dead letters `<prefix>dead-letter`
    prefix: str = attrs.field(default="jobfsm.", validator=_prefix)
    queue_type: str = attrs.field(default="classic", validator=_queue_type)
    #: False: queues must exist (passive declare); a missing one is a 404, not retried
    declare: bool = attrs.field(default=True, validator=_flag)
    #: unacked deliveries per queue subscription; None: the capacity of the first poll
    prefetch: int | None = attrs.field(default=None, validator=_optional_prefetch)
    #: reconnection attempts after a recoverable failure; 0 disables recovery
    recovery_attempts: int = attrs.field(default=5, validator=_integer(0))
    #: seconds between attempts (the first is immediate)
    recovery_interval: float = attrs.field(default=60.0, validator=_number(0, strict=False))
    #: a delivery buffered this long without a free slot is returned to the broker
    max_hold: float = attrs.field(default=60.0, validator=_number(0, strict=True))
    #: how often the I/O thread looks for a closed channel while idle
    idle_check: float = attrs.field(default=0.2, validator=_number(0, strict=True))
    #: TCP connect / socket / blocked-connection bound, seconds
    connect_timeout: float = attrs.field(default=5.0, validator=_number(0, strict=True))
    #: AMQP heartbeat proposed to the broker, seconds
    heartbeat: int = attrs.field(default=30, validator=_integer(1))
    #: reconnect-and-retry rounds of one publish call after a connection loss
    publish_retries: int = attrs.field(default=1, validator=_integer(0))
    #: False: `publish` returns once wake-ups are queued (commits handled by sender threads)
    publish_wait: bool = attrs.field(default=False, validator=_flag)
    #: wake-ups published in one AMQP transaction (one durable commit at the broker)
    publish_batch: int = attrs.field(default=100, validator=_integer(1))
    #: sender threads, one connection each, for asynchronous publishing
    publisher_threads: int = attrs.field(default=4, validator=_integer(1))
    #: wake-ups queued in memory at most; beyond, they are left to the repair sweep
    outbox_limit: int = attrs.field(default=10_000, validator=_integer(1))
    #: longest wait for queued wake-ups at close, and for a waiting publish
    publish_timeout: float = attrs.field(default=10.0, validator=_number(0, strict=True))
    #: with an engine: dead-letter wake-ups naming a job the store does not know (one read each)
    verify_job_ids: bool = attrs.field(default=True, validator=_flag)
    #: largest message body accepted from the broker; larger is dead-lettered
    max_message_bytes: int = attrs.field(default=64 * 1024, validator=_integer(64))
    #: repair sweep period (needs an engine), seconds
    repair_interval: float = attrs.field(default=5.0, validator=_number(0, strict=True))
    #: a job queued at submit is republished once due this long without a lease
    repair_after: float = attrs.field(default=10.0, validator=_number(0, strict=False))
    #: at most this many wake-ups republished per sweep
    repair_batch: int = attrs.field(default=500, validator=_integer(1))
    #: at most this many waiting jobs read per sweep
    repair_scan_limit: int = attrs.field(default=1000, validator=_integer(1))
    #: False only in tests: settle does not ack (reproduces the consumer-timeout failure)
    ack_on_settle: bool = attrs.field(default=True, validator=_flag)

    def queue_name(self, queue: str) -> str:
        return f"{self.prefix}{check_name('queue', queue)}"

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.prefix}dead-letter"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}dead-letter"
