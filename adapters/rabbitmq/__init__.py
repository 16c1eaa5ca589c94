"""RabbitMQ delivery (pika): wake-ups through the broker, the store as the truth.

Entry point `rabbitmq = "adapters.rabbitmq:RabbitDelivery"`. See docs/rabbitmq.md.
"""

from __future__ import annotations

from .classify import Verdict, classify
from .config import RabbitConfig
from .delivery import RabbitDelivery
from .errors import DeliveryFailed, PublishFailed
from .messages import REASON_HEADER, PoisonMessage
from .settling import Token

__all__ = [
    "REASON_HEADER",
    "DeliveryFailed",
    "PoisonMessage",
    "PublishFailed",
    "RabbitConfig",
    "RabbitDelivery",
    "Token",
    "Verdict",
    "classify",
]
