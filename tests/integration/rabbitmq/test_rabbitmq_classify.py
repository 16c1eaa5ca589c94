"""Which broker failures are recovered from and which stop the worker (no broker needed)."""

from __future__ import annotations

import socket

import pytest
from pika import exceptions as pika_errors
from pika.adapters.utils import connection_workflow as workflow

from adapters.rabbitmq import classify
from adapters.rabbitmq.classify import ConsumerCancelled, ConsumptionEnded

ACK_TIMEOUT_TEXT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. "
    "Timeout value used: 1800000 ms. This timeout value can be configured, see consumers doc "
    "guide to learn more"
)


@pytest.mark.parametrize(
    ("error", "recoverable", "kind"),
    [
        (pika_errors.StreamLostError("Transport indicated EOF"), True, "stream-lost"),
        (pika_errors.AMQPHeartbeatTimeout("no heartbeat"), True, "stream-lost"),
        (pika_errors.AMQPConnectionError("Connection refused"), True, "connection-lost"),
        (pika_errors.ConnectionClosedByBroker(320, "CONNECTION_FORCED - test"), True, "closed-320"),
        (pika_errors.ChannelClosedByBroker(541, "INTERNAL_ERROR"), True, "closed-541"),
        (pika_errors.ChannelClosedByBroker(406, ACK_TIMEOUT_TEXT), True, "ack-timeout"),
        (ConsumerCancelled("queue deleted"), True, "consumer-cancelled"),
        (ConsumptionEnded("no consumer left"), True, "consumption-ended"),
        (pika_errors.ProbableAuthenticationError("ACCESS_REFUSED"), False, "auth"),
        (pika_errors.ProbableAccessDeniedError("vhost"), False, "access-denied"),
        (pika_errors.ChannelClosedByBroker(403, "ACCESS_REFUSED"), False, "access-refused"),
        (pika_errors.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'q'"), False, "not-found"),
        (
            pika_errors.ChannelClosedByBroker(406, "PRECONDITION_FAILED - inequivalent arg"),
            False,
            "precondition-failed",
        ),
        (pika_errors.ConnectionClosedByBroker(530, "NOT_ALLOWED"), False, "closed-530"),
        (TypeError("a bug"), False, "unexpected"),
        # connection set-up: handshake timeouts and DNS are transient, another protocol fatal
        (
            workflow.AMQPConnectorStackTimeout("Timeout during AMQP handshake"),
            True,
            "handshake-timeout",
        ),
        (socket.gaierror(-2, "Name or service not known"), True, "dns"),
        (TimeoutError("timed out"), True, "connection-lost"),
        (OSError(113, "No route to host"), True, "connection-lost"),
        (
            pika_errors.AMQPConnectionError(
                workflow.AMQPConnectorSocketConnectError(ConnectionRefusedError(111, "refused"))
            ),
            True,
            "connection-lost",
        ),
        (
            workflow.AMQPConnectorAMQPHandshakeError(pika_errors.StreamLostError("EOF")),
            True,
            "stream-lost",
        ),
        (
            pika_errors.IncompatibleProtocolError("StreamLostError: ('Transport indicated EOF',)"),
            False,
            "incompatible-protocol",
        ),
        (
            workflow.AMQPConnectorAMQPHandshakeError(pika_errors.IncompatibleProtocolError("x")),
            False,
            "incompatible-protocol",
        ),
    ],
)
def test_failures_are_classified_as_the_contract_says(
    error: BaseException, recoverable: bool, kind: str
) -> None:
    verdict = classify(error)
    assert (verdict.recoverable, verdict.kind) == (recoverable, kind)
    assert type(error).__name__ in verdict.detail
