"""OpenTelemetry spans for jobs, through `opentelemetry-api` only (`jobfsm[tracing]`).

The application brings the SDK and exporter; without one installed, the API's
no-op tracer makes every call here nearly free. Three spans:

- `submit_span`: around a submit, in the caller's trace (a web request's, say).
  When the caller sets no correlation id, the span's W3C `traceparent` becomes
  the job's correlation id, so the attempts can link to it.
- `attempt_span`: around one attempt, in a trace of its own tagged with the
  correlation id. If that id is a `traceparent`, the attempt links to the span it
  names (the submit span's, from the request that caused the job): a link, never
  the parent, since whoever submits chooses the correlation id and must not be able
  to put a worker's spans in a trace of their choosing.
- `operator_span`: around an operator action (cancel, requeue, resolve).

The trace context travels in the correlation id, an existing field of the job;
carrying a full context (trace state, baggage) would need a new field in the job
record and every store's schema, which this module does not do.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MissingExtra
from ..records import Job
from ..secrets import scrub_urls
from ..text import clean_text
from .observers import ObserverBase

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

TRACER_NAME = "jobfsm"
#: characters of an error kept as a span's status text (after URL secrets are masked)
STATUS_CHARS = 500
_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


class MissingTracing(MissingExtra):
    """opentelemetry-api is not installed (the `tracing` extra)."""


#: `opentelemetry.trace` once imported, or the ImportError that said it is missing: the
#: worker asks `recording()` once per attempt, and an import statement each time cost
#: about a third of it (a missing package: a search of the import path each time)
_API: Any = None


def _trace() -> Any:
    global _API  # the one cache of this module, set once
    if _API is None:
        try:
            from opentelemetry import trace

            _API = trace
        except ImportError as err:
            _API = err
    if isinstance(_API, ImportError):
        raise MissingTracing("OpenTelemetry spans (opentelemetry-api)", "tracing") from _API
    return _API


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
    try:
        trace = _trace()  # asked once per attempt by the worker: one look, one call
    except MissingTracing:
        return False
    current = trace.get_tracer_provider()
    return not isinstance(current, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


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


class Submits(Protocol):
    """What `traced_submit` submits through: an `Engine`."""

    def submit(self, kind: str, payload: Any = None, *, conn: Any = None, **opts: Any) -> Job: ...


def traced_submit(
    engine: Submits,
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


def _links_of(job: Job) -> list[Any]:
    """A link to the span a `traceparent` correlation id names; none for any other id.
    Never a parent: the correlation id is the submitter's choice (see the module)."""
    if job.correlation_id is None or not _TRACEPARENT.match(job.correlation_id):
        return []
    trace = _trace()
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": job.correlation_id})
    linked = trace.get_current_span(context).get_span_context()
    return [trace.Link(linked)] if linked.is_valid else []


@contextmanager
def attempt_span(job: Job, *, provider: TracerProvider | None = None) -> Iterator[Span]:
    """A CONSUMER span around one attempt of `job` (as leased: attempt and fence set)."""
    trace = _trace()
    with tracer(provider).start_as_current_span(
        f"jobfsm attempt {job.kind}",
        kind=trace.SpanKind.CONSUMER,
        attributes=_job_attributes(job),
        links=_links_of(job),
    ) as span:
        yield span


def set_outcome(span: Span, status: str, error: str | None = None) -> None:
    """Record how the attempt ended (an `fsm.ports.OUTCOMES` name) on its span; the
    error text, whose URLs' secrets are masked (`fsm.secrets.scrub_urls`), is the
    status, cut at STATUS_CHARS."""
    trace = _trace()
    span.set_attribute("jobfsm.attempt.outcome", status)
    if status != "succeeded":
        text = clean_text(scrub_urls(clean_text(error)), STATUS_CHARS) if error else status
        span.set_status(trace.Status(trace.StatusCode.ERROR, text))


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
        kind=trace.SpanKind.CONSUMER,
        attributes=_job_attributes(job),
        links=_links_of(job),
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


class TracingObserver(ObserverBase):
    """Spans of attempts (`record_attempt`, when a tracer provider records) and of
    operator actions (`operator_span`), sent to `provider` (default: OpenTelemetry's
    global one). The service attaches one whenever opentelemetry-api is installed."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider

    def on_attempt(self, job: Job, status: str, error: str | None, seconds: float) -> None:
        if recording(self.provider):
            record_attempt(job, status, error, seconds, provider=self.provider)

    def operator(self, action: str, target: str, actor: str) -> AbstractContextManager[object]:
        return operator_span(action, target, actor=actor, provider=self.provider)
