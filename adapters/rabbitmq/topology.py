"""Connection parameters and the broker topology: work queues and the dead-letter pair."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._pika import pika
from .config import RabbitConfig


def parameters(config: RabbitConfig) -> Any:
    """pika parameters with every wait bounded by the config (one TCP attempt each)."""
    params = pika.URLParameters(config.url)
    params.connection_attempts = 1
    params.retry_delay = 0
    params.socket_timeout = config.connect_timeout
    params.stack_timeout = config.connect_timeout
    params.blocked_connection_timeout = config.connect_timeout * 6
    params.heartbeat = config.heartbeat
    return params


def queue_arguments(config: RabbitConfig) -> dict[str, Any]:
    return {
        "x-queue-type": config.queue_type,
        "x-dead-letter-exchange": config.dead_letter_exchange,
    }


def declare_dead_letters(channel: Any, config: RabbitConfig) -> None:
    """The dead-letter exchange (fanout) and queue; passive when `declare` is off."""
    passive = not config.declare
    channel.exchange_declare(
        config.dead_letter_exchange, exchange_type="fanout", durable=True, passive=passive
    )
    channel.queue_declare(
        config.dead_letter_queue,
        durable=True,
        passive=passive,
        arguments=None if passive else {"x-queue-type": config.queue_type},
    )
    if not passive:
        channel.queue_bind(config.dead_letter_queue, config.dead_letter_exchange)


def declare_queues(channel: Any, config: RabbitConfig, queues: Iterable[str]) -> dict[str, int]:
    """Declare (or, with `declare` off, check) each work queue; returns ready message counts."""
    counts: dict[str, int] = {}
    for queue in queues:
        name = config.queue_name(queue)
        if config.declare:
            ok = channel.queue_declare(name, durable=True, arguments=queue_arguments(config))
        else:
            ok = channel.queue_declare(name, passive=True)
        counts[queue] = int(ok.method.message_count)
    return counts
