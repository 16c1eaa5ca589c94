"""Typed payloads end to end (docs/typed-payloads.md): jobs submitted by a process that
knows the kinds' types (the same `Handlers` declaration the worker runs) through a real
`Worker` on a SQLite file, with the thread executor and the process executor (the child
imports the handler and the payload type by path; the payload crosses as JSON). The
handler receives an instance of the type. A job stored by a submitter that did not
know the type, with a payload that does not fit, fails at once naming the field."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.worker import Worker

from .typed_app import Address, Email, handlers


@pytest.fixture(params=["thread", "process"])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A worker with `request.param` executor serving the typed kinds; yields the URL."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    worker = Worker(
        Engine(store),
        handlers,
        executor=request.param,
        queues=("default",),
        concurrency=2,
        poll_interval=0.05,
        install_signals=False,
        scheduler=False,
    )
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert worker.wait_started(30)
    try:
        yield url
    finally:
        worker.stop()
        runner.join(60)
        store.close()


def test_the_handler_receives_the_typed_payload(running: str) -> None:
    # given a process that only submits, with the kinds the worker declares
    store = open_store(running)
    try:
        submitter = Engine(store, kinds=handlers.policies())
        at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
        email = submitter.submit(
            "email.send", Email("a@example.com", "hi", address=Address("Berlin", "1"), at=at)
        )
        invoice = submitter.submit("invoice.issue", {"number": 7, "amount": 2, "customer": "X"})
        # when the worker runs them
        done = [submitter.wait(j.id, timeout=60) for j in (email, invoice)]
        # then each handler saw an instance of its kind's type
        assert [j.state for j in done] == ["succeeded", "succeeded"], [j.last_error for j in done]
        assert json.loads(done[0].result_json or "") == {
            "type": "Email",
            "to": "a@example.com",
            "city": "Berlin",
            "at": "2030-01-02T03:04:05+00:00",
        }
        assert json.loads(done[1].result_json or "") == {
            "type": "Invoice",
            "number": 7,
            "amount": 2.0,
        }
    finally:
        store.close()


def test_a_payload_stored_without_its_type_fails_naming_the_field(running: str) -> None:
    # given a submitter that does not know the kind's type: the payload is not checked
    store = open_store(running)
    try:
        blind = Engine(store)
        job = blind.submit("email.send", {"to": 5, "subject": "hi"}, retry_safe=True)
        # when the worker runs it, then it fails at once (retrying cannot help), naming it
        done = blind.wait(job.id, timeout=60)
        assert done.state == "failed"
        assert done.attempt == 1
        assert "field 'to'" in (done.last_error or ""), done.last_error
    finally:
        store.close()
