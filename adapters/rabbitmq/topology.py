"""Connection parameters and the broker topology: work queues and the dead-letter pair."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ._pika import pika, pika_errors
from .config import RabbitConfig

log = logging.getLogger(__name__)


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


def dead_letter_arguments(config: RabbitConfig) -> dict[str, Any]:
    """The dead-letter queue is bounded: `dead_letter_max_length` messages (the oldest
    dropped first) kept at most `dead_letter_ttl` seconds."""
    return {
        "x-queue-type": config.queue_type,
        "x-max-length": config.dead_letter_max_length,
        "x-overflow": "drop-head",
        "x-message-ttl": int(config.dead_letter_ttl * 1000),
    }


def declare_dead_letters(conn: Any, config: RabbitConfig) -> None:
    """The dead-letter exchange (fanout) and queue, on a short-lived channel of `conn`;
    passive when `declare` is off.

    A dead-letter queue declared earlier with other arguments (an older jobfsm declared it
    unbounded) is kept as it is, with a warning: a 406 here must not stop every worker.
    """
    passive = not config.declare
    channel = conn.channel()
    channel.exchange_declare(
        config.dead_letter_exchange, exchange_type="fanout", durable=True, passive=passive
    )
    try:
        channel.queue_declare(
            config.dead_letter_queue,
            durable=True,
            passive=passive,
            arguments=None if passive else dead_letter_arguments(config),
        )
    except pika_errors.ChannelClosedByBroker as err:
        if passive or err.reply_code != 406:
            raise
        log.warning(
            "RabbitMQ dead-letter queue %r exists with other arguments (%s); it is used as it "
            "is, without the bounds max-length %d and message TTL %g s: delete it (it is "
            "declared again) or bound it with a broker policy",
            config.dead_letter_queue,
            err.reply_text,
            config.dead_letter_max_length,
            config.dead_letter_ttl,
        )
        channel = conn.channel()
        channel.queue_declare(config.dead_letter_queue, passive=True)
    if not passive:
        channel.queue_bind(config.dead_letter_queue, config.dead_letter_exchange)
    channel.close()


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
