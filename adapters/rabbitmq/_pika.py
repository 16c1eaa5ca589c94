"""The one place pika is imported; a missing pika names the extra to install."""

from __future__ import annotations

from fsm.errors import MissingExtra

try:
    import pika
    from pika import exceptions as pika_errors
except ModuleNotFoundError as err:  # pragma: no cover - exercised only without the extra
    raise MissingExtra("the RabbitMQ delivery (pika is missing)", "rabbitmq") from err

__all__ = ["pika", "pika_errors"]
