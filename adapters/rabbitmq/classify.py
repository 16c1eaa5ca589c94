"""Which broker failures are worth a reconnect, and which must stop the worker at once."""

from __future__ import annotations

import socket
import ssl

import attrs
from pika.adapters.utils import connection_workflow as workflow

from ._pika import pika_errors

#: connection-forced (admin close, node shutdown) and internal-error: a reconnect may work
RECOVERABLE_CODES = frozenset({320, 541})
#: fatal on the first connection, transient once the broker has answered AMQP at the URL:
#: the URL did not change, so it is the path to the broker that fails now (a balancer or
#: proxy whose backend is down accepts the connection and closes it before any byte,
#: which pika reports as an incompatible protocol)
TRANSIENT_ONCE_CONNECTED = frozenset({"incompatible-protocol"})
_ANOTHER_SERVICE = " (the URL's host and port answer, but not with AMQP: another service?)"
_PATH_DOWN = " (closed before the AMQP handshake: a proxy or balancer whose broker is down?)"


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
    verdict = _classify_connect(err, detail)
    if verdict is not None:
        return verdict
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
        | OSError,  # ConnectionError, TimeoutError (socket.timeout), unreachable networks
    ):
        return Verdict(True, "connection-lost", detail)
    return Verdict(False, "unexpected", detail)


def once_connected(verdict: Verdict) -> Verdict:
    """`verdict` for a client that was connected to this URL before: the kinds of
    TRANSIENT_ONCE_CONNECTED become recoverable (an attempt of the recovery budget)."""
    if verdict.recoverable or verdict.kind not in TRANSIENT_ONCE_CONNECTED:
        return verdict
    return Verdict(True, verdict.kind, verdict.detail.removesuffix(_ANOTHER_SERVICE) + _PATH_DOWN)


def _classify_connect(err: BaseException, detail: str) -> Verdict | None:
    """Failures of opening a connection: credentials and protocol are fatal, the rest
    (refused, DNS, handshake timeouts, wrapped or not) worth another attempt."""
    if isinstance(err, pika_errors.ProbableAuthenticationError | pika_errors.AuthenticationError):
        refused = "ACCESS_REFUSED" in str(err)
        return Verdict(
            False,
            "auth",
            f"{type(err).__name__}: the broker refused the login"
            + (" (ACCESS_REFUSED)" if refused else "")
            + ": check the user and password of the AMQP URL",
        )
    if isinstance(err, pika_errors.ProbableAccessDeniedError):
        return Verdict(False, "access-denied", detail)
    if isinstance(err, pika_errors.IncompatibleProtocolError):
        return Verdict(
            False,
            "incompatible-protocol",
            detail + _ANOTHER_SERVICE,
        )
    if isinstance(err, ssl.SSLCertVerificationError):
        return Verdict(False, "tls-verify", detail)
    # pika's connection workflow wraps the cause of a failed phase; judge the cause
    inner = getattr(err, "exception", None)
    if isinstance(err, workflow.AMQPConnectorPhaseErrorBase) and isinstance(inner, BaseException):
        verdict = classify(inner)
        if verdict.kind != "unexpected":
            return Verdict(verdict.recoverable, verdict.kind, detail)
        return Verdict(True, "connect-failed", detail)
    if type(err) is pika_errors.AMQPConnectionError and err.args:
        first = err.args[0]
        if isinstance(first, BaseException):
            verdict = classify(first)
            recoverable = verdict.recoverable or verdict.kind == "unexpected"
            return Verdict(recoverable, verdict.kind, detail)
    if isinstance(err, workflow.AMQPConnectorStackTimeout):
        return Verdict(True, "handshake-timeout", detail)
    if isinstance(err, workflow.AMQPConnectorException):
        return Verdict(True, "connect-failed", detail)
    if isinstance(err, socket.gaierror):
        return Verdict(True, "dns", detail)
    return None
