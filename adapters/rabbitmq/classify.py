"""Which broker failures are worth a reconnect, and which must stop the worker at once."""

from __future__ import annotations

import attrs

from ._pika import pika_errors

#: connection-forced (admin close, node shutdown) and internal-error: a reconnect may work
RECOVERABLE_CODES = frozenset({320, 541})


class ConsumerCancelled(Exception):
    """The broker cancelled one of our consumers (queue deleted, node failover)."""


class ConsumptionEnded(Exception):
    """Consumption stopped although nobody asked it to."""


@attrs.frozen
class Verdict:
    recoverable: bool
    kind: str  # short name for logs: "stream-lost", "ack-timeout", "auth", ...
    detail: str


def _is_ack_timeout(code: int, text: str) -> bool:
    lowered = text.lower()
    return code == 406 and "acknowledgement" in lowered and "timed out" in lowered


def classify(err: BaseException) -> Verdict:
    """Sort a failure into recoverable (reconnect within budget) or fatal."""
    detail = f"{type(err).__name__}: {err}"
    if isinstance(err, pika_errors.ProbableAuthenticationError | pika_errors.AuthenticationError):
        return Verdict(False, "auth", detail)
    if isinstance(err, pika_errors.ProbableAccessDeniedError):
        return Verdict(False, "access-denied", detail)
    if isinstance(err, pika_errors.ConnectionClosedByBroker | pika_errors.ChannelClosedByBroker):
        code, text = err.reply_code, err.reply_text
        if _is_ack_timeout(code, text):
            return Verdict(True, "ack-timeout", detail)
        if code in RECOVERABLE_CODES:
            return Verdict(True, f"closed-{code}", detail)
        names = {403: "access-refused", 404: "not-found", 406: "precondition-failed"}
        return Verdict(False, names.get(code, f"closed-{code}"), detail)
    if isinstance(err, ConsumerCancelled):
        return Verdict(True, "consumer-cancelled", detail)
    if isinstance(err, ConsumptionEnded):
        return Verdict(True, "consumption-ended", detail)
    if isinstance(err, pika_errors.StreamLostError | pika_errors.AMQPHeartbeatTimeout):
        return Verdict(True, "stream-lost", detail)
    if isinstance(
        err,
        pika_errors.AMQPConnectionError
        | pika_errors.ConnectionClosed
        | pika_errors.ChannelClosed
        | pika_errors.ConnectionWrongStateError
        | pika_errors.ChannelWrongStateError
        | ConnectionError
        | TimeoutError,
    ):
        return Verdict(True, "connection-lost", detail)
    return Verdict(False, "unexpected", detail)
