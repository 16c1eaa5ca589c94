"""OpenTelemetry spans (fsm.telemetry.tracing) seen through the SDK's in-memory exporter:
every attempt of a job links to the submit span of the request that caused it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fsm import Engine, Owner, open_store
from fsm.telemetry.tracing import (
    attempt_span,
    operator_span,
    set_outcome,
    submit_span,
    traced_submit,
    tracer,
)

OWNER = Owner("host", 1, "incarnation")


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _run_attempt(engine: Engine, provider: TracerProvider, *, fail: bool) -> None:
    (job,) = engine.claim(OWNER, ["default"], limit=1)
    running = engine.start(job.id, job.fence)
    with attempt_span(running, provider=provider) as span:
        if fail:
            engine.fail(job.id, job.fence, "boom", delay=0.0)
            set_outcome(span, "failed", "boom")
        else:
            engine.succeed(job.id, job.fence, "ok")
            set_outcome(span, "succeeded")


def test_every_attempt_links_to_the_requests_submit_in_a_trace_of_its_own(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    engine = Engine(open_store("memory://"))
    # given a web request that submits a job
    with tracer(provider).start_as_current_span("POST /orders") as request_span:
        job = traced_submit(engine, "order.ship", {"order": 7}, provider=provider)
    # when a worker runs it twice (a retry, then success), each attempt in a span
    _run_attempt(engine, provider, fail=True)
    _run_attempt(engine, provider, fail=False)
    # then request -> submit is one trace; each attempt links to the submit
    finished = {s.name: s for s in exporter.get_finished_spans()}
    submit = finished["jobfsm submit order.ship"]
    attempts = [s for s in exporter.get_finished_spans() if s.name == "jobfsm attempt order.ship"]
    trace_id = request_span.get_span_context().trace_id
    assert submit.context.trace_id == trace_id
    assert submit.parent is not None
    assert submit.parent.span_id == request_span.get_span_context().span_id
    assert submit.kind == SpanKind.PRODUCER
    assert submit.attributes["jobfsm.job.id"] == job.id
    assert len(attempts) == 2
    for span in attempts:
        assert span.parent is None
        assert span.context.trace_id != trace_id
        (link,) = span.links
        assert (link.context.trace_id, link.context.span_id) == (
            trace_id,
            submit.context.span_id,
        )
        assert span.kind == SpanKind.CONSUMER
    assert [s.attributes["jobfsm.job.attempt"] for s in attempts] == [1, 2]
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert attempts[1].attributes["jobfsm.attempt.outcome"] == "succeeded"
    carried = engine.get(job.id).correlation_id
    assert carried is not None
    assert carried.startswith(f"00-{trace_id:032x}-{submit.context.span_id:016x}-")


def test_a_caller_correlation_id_is_kept_and_attempts_start_their_own_trace(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    engine = Engine(open_store("memory://"))
    job = traced_submit(engine, "k", None, provider=provider, correlation_id="req-42")
    assert job.correlation_id == "req-42"
    _run_attempt(engine, provider, fail=False)
    submit, attempt = exporter.get_finished_spans()
    assert attempt.parent is None
    assert attempt.attributes["jobfsm.correlation_id"] == "req-42"
    assert attempt.context.trace_id != submit.context.trace_id


def test_operator_actions_get_a_span_with_the_actor(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    engine = Engine(open_store("memory://"))
    job = engine.submit("k")
    with operator_span("cancel", job.id, actor="alice", provider=provider):
        engine.cancel(job.id, actor="alice", reason="test")
    (span,) = exporter.get_finished_spans()
    assert span.name == "jobfsm cancel"
    assert span.attributes["jobfsm.operator.actor"] == "alice"


def test_without_an_sdk_the_api_spans_are_no_ops() -> None:
    with submit_span("k") as traced:
        assert traced.correlation_id is None  # no-op span: no traceparent to carry


def test_dashboard_actions_are_traced_with_the_actor(
    spans: tuple[TracerProvider, InMemorySpanExporter], sqlite_url: str
) -> None:
    from .clients import csrf_of, operator

    provider, exporter = spans
    store = open_store(sqlite_url)
    try:
        engine = Engine(store)
        job = engine.submit("k")
        with operator(engine, "dan", tracer_provider=provider) as c:
            form = {"csrf": csrf_of(c, "/"), "action": "cancel", "reason": "not needed"}
            done = c.post(f"/jobs/{job.id}/act", data=form, follow_redirects=False)
        assert done.status_code == 303
    finally:
        store.close()
    (span,) = exporter.get_finished_spans()
    assert span.name == "jobfsm cancel"
    assert span.attributes["jobfsm.operator.actor"] == "dan"
    assert span.attributes["jobfsm.job.id"] == job.id


def test_a_workers_attempts_are_spans_linked_to_the_submitters_trace(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    import threading
    import time

    from fsm import Worker
    from fsm.service.identity import Identity

    provider, exporter = spans
    engine = Engine(open_store("memory://"))
    calls: list[int] = []

    def handler(ctx: object) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    worker = Worker(
        engine,
        {"order.ship": handler},
        identity=Identity(),
        poll_interval=0.05,
        install_signals=False,
        tracer_provider=provider,
    )
    # given a request that submits a job, and a worker that runs it (a retry, then success)
    with tracer(provider).start_as_current_span("POST /orders") as request_span:
        job = traced_submit(engine, "order.ship", {}, provider=provider, delay=0.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        until = time.monotonic() + 20
        while time.monotonic() < until and engine.get(job.id).state != "succeeded":
            engine.transition  # noqa: B018 - nothing to do but wait
            time.sleep(0.05)
    finally:
        worker.stop(now=True)
        thread.join(10)
    # then both attempts are spans linked to the request's trace, the failure an error
    attempts = [s for s in exporter.get_finished_spans() if s.name == "jobfsm attempt order.ship"]
    assert engine.get(job.id).state == "succeeded"
    assert len(attempts) == 2
    trace_id = request_span.get_span_context().trace_id
    assert {link.context.trace_id for s in attempts for link in s.links} == {trace_id}
    assert trace_id not in {s.context.trace_id for s in attempts}
    assert sorted(s.attributes["jobfsm.attempt.outcome"] for s in attempts) == [
        "failed",
        "succeeded",
    ]
    assert any(s.status.status_code is StatusCode.ERROR for s in attempts)


def test_operator_actions_from_any_surface_are_one_span_each(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    engine = Engine(open_store("memory://"), tracer_provider=provider)
    job = engine.submit("k")
    # when the CLI, a script or the dashboard cancels it (all go through the Engine)
    engine.cancel(job.id, actor="bob", reason="duplicate")
    # then one span names the action, the job and the actor
    (span,) = exporter.get_finished_spans()
    assert span.name == "jobfsm cancel"
    assert (span.attributes["jobfsm.job.id"], span.attributes["jobfsm.operator.actor"]) == (
        job.id,
        "bob",
    )


def test_a_foreign_traceparent_is_a_link_and_never_the_parent(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    engine = Engine(open_store("memory://"))
    # given a submitter that picks the trace of its choosing as the correlation id
    chosen = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    engine.submit("k", correlation_id=chosen)
    # when a worker runs the job
    _run_attempt(engine, provider, fail=False)
    # then the attempt is no span of that trace, only linked to it
    (attempt,) = exporter.get_finished_spans()
    assert attempt.parent is None
    assert attempt.context.trace_id != int("ab" * 16, 16)
    (link,) = attempt.links
    assert link.context.trace_id == int("ab" * 16, 16)


def test_a_failed_attempts_status_is_cut_and_masks_url_secrets(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    from fsm.telemetry.tracing import STATUS_CHARS

    provider, exporter = spans
    error = (
        "OperationalError: cannot reach postgresql://app:s3cr3t-pw@db.internal/jobs"
        "?sslpassword=k3y-pass&application_name=w " + "x" * 10_000
    )
    # when an attempt fails with a driver error quoting the URL it used
    with tracer(provider).start_as_current_span("attempt") as span:
        set_outcome(span, "failed", error)
    # then the status holds neither secret and is bounded
    (done,) = exporter.get_finished_spans()
    text = done.status.description or ""
    assert text.startswith("OperationalError: cannot reach postgresql://")
    assert "s3cr3t" not in text
    assert "k3y-pass" not in text
    assert len(text) <= STATUS_CHARS
