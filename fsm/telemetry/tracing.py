"""OpenTelemetry spans for jobs, through `opentelemetry-api` only (`jobfsm[tracing]`).

The application brings the SDK and exporter; without one installed, the API's
no-op tracer makes every call here nearly free. Three spans:

- `submit_span`: around a submit, in the caller's trace (a web request's, say).
  When the caller sets no correlation id, the span's W3C `traceparent` becomes
  the job's correlation id, so the worker can continue the same trace.
- `attempt_span`: around one attempt. If the job's correlation id is a
  `traceparent`, the attempt is a child of the submit span: one trace from the
  request to every attempt of the job it caused. Otherwise the attempt starts a
  trace of its own, tagged with the correlation id.
- `operator_span`: around an operator action (cancel, requeue, resolve).

The trace context travels in the correlation id, an existing field of the job;
carrying a full context (trace state, baggage) would need a new field in the job
record and every store's schema, which this module does not do.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra
from ..records import Job

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ..engine import Engine

TRACER_NAME = "jobfsm"
_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


class MissingTracing(MissingExtra):
    """opentelemetry-api is not installed (the `tracing` extra)."""


def _trace() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as err:
        raise MissingTracing("OpenTelemetry spans (opentelemetry-api)", "tracing") from err
    return trace


def available() -> bool:
    """Whether opentelemetry-api is installed (spans can be made)."""
    try:
        _trace()
    except MissingTracing:
        return False
    return True


def recording(provider: TracerProvider | None = None) -> bool:
    """Whether spans made now would go anywhere: a provider is given, or the application
    has set a global one (until then the API's proxy records nothing, and the worker
    skips the span it would make for each attempt)."""
    if provider is not None:
        return True
    if not available():
        return False
    trace = _trace()
    current = trace.get_tracer_provider()
    return not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def tracer(provider: TracerProvider | None = None) -> Tracer:
    """jobfsm's tracer from `provider` (default: the global one the application set)."""
    t: Tracer = _trace().get_tracer(TRACER_NAME, tracer_provider=provider)
    return t


def _job_attributes(job: Job) -> dict[str, Any]:
    return {
        "jobfsm.job.id": job.id,
        "jobfsm.job.kind": job.kind,
        "jobfsm.job.queue": job.queue,
        "jobfsm.job.attempt": job.attempt,
        "jobfsm.job.fence": job.fence,
        "jobfsm.correlation_id": job.correlation_id or "",
    }


def traceparent(span: Span) -> str | None:
    """The W3C traceparent of `span`, or None if it is not recording a valid context."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class SubmitTrace:
    """What `submit_span` yields: the correlation id to submit with, and `record(job)`."""

    def __init__(self, span: Span, correlation_id: str | None) -> None:
        self.span = span
        self.correlation_id = correlation_id

    def record(self, job: Job) -> None:
        self.span.set_attributes(_job_attributes(job))


@contextmanager
def submit_span(
    kind: str,
    *,
    queue: str | None = None,
    correlation_id: str | None = None,
    provider: TracerProvider | None = None,
) -> Iterator[SubmitTrace]:
    """A PRODUCER span around one submit, in the current trace."""
    trace = _trace()
    attributes = {"jobfsm.job.kind": kind, "jobfsm.job.queue": queue or ""}
    with tracer(provider).start_as_current_span(
        f"jobfsm submit {kind}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield SubmitTrace(span, correlation_id or traceparent(span))


def traced_submit(
    engine: Engine,
    kind: str,
    payload: Any = None,
    *,
    provider: TracerProvider | None = None,
    **opts: Any,
) -> Job:
    """`engine.submit` inside a `submit_span` (the call the engine's submit would make)."""
    with submit_span(
        kind,
        queue=opts.get("queue"),
        correlation_id=opts.pop("correlation_id", None),
        provider=provider,
    ) as traced:
        job = engine.submit(kind, payload, correlation_id=traced.correlation_id, **opts)
        traced.record(job)
        return job


def _parent_of(job: Job) -> Any:
    """The submit span's context if the correlation id is a traceparent, else None."""
    if job.correlation_id is None or not _TRACEPARENT.match(job.correlation_id):
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": job.correlation_id})


@contextmanager
def attempt_span(job: Job, *, provider: TracerProvider | None = None) -> Iterator[Span]:
    """A CONSUMER span around one attempt of `job` (as leased: attempt and fence set)."""
    trace = _trace()
    with tracer(provider).start_as_current_span(
        f"jobfsm attempt {job.kind}",
        context=_parent_of(job),
        kind=trace.SpanKind.CONSUMER,
        attributes=_job_attributes(job),
    ) as span:
        yield span


def set_outcome(span: Span, status: str, error: str | None = None) -> None:
    """Record how the attempt ended (an `fsm.ports.OUTCOMES` name) on its span."""
    trace = _trace()
    span.set_attribute("jobfsm.attempt.outcome", status)
    if status != "succeeded":
        span.set_status(trace.Status(trace.StatusCode.ERROR, error or status))


def record_attempt(
    job: Job,
    status: str,
    error: str | None,
    seconds: float,
    *,
    provider: TracerProvider | None = None,
) -> None:
    """The span of an attempt that already ended (`seconds` long, ending now).

    The worker records every attempt this way when its outcome arrives, whichever
    executor ran it: a child process has no tracer of the worker's, the worker has.
    """
    trace = _trace()
    end = time.time_ns()
    span = tracer(provider).start_span(
        f"jobfsm attempt {job.kind}",
        context=_parent_of(job),
        kind=trace.SpanKind.CONSUMER,
        attributes=_job_attributes(job),
        start_time=end - int(max(seconds, 0.0) * 1e9),
    )
    set_outcome(span, status, error)
    span.end(end_time=end)


@contextmanager
def operator_span(
    action: str, job_id: str, *, actor: str, provider: TracerProvider | None = None
) -> Iterator[Span]:
    """An INTERNAL span around an operator action (cancel, requeue, resolve)."""
    with tracer(provider).start_as_current_span(
        f"jobfsm {action}",
        attributes={"jobfsm.job.id": job_id, "jobfsm.operator.actor": actor},
    ) as span:
        yield span
