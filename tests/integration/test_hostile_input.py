"""Hostile input against submit, submit_many and the CLI, on SQLite and PostgreSQL.

Property: every generated case is either stored (and then runs to a final state)
or refused with a `BadInput` naming the argument; nothing else is ever raised,
nothing already stored changes, and a worker serving the queue is still alive and
still running ordinary jobs at the end.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm import BadInput, Engine, KindPolicy, Worker, open_store
from fsm.cli import cli
from fsm.inputs import INT64_MAX
from fsm.jsonio import MAX_DEPTH
from fsm.records import Job
from fsm.service.identity import Identity

QUEUE = "hostile"
#: how many cases one property sees (the CI profile's size would take minutes here)
EXAMPLES = 60


def _deep(depth: int, wide: bool) -> Any:
    value: Any = list(range(50)) if wide else 0
    for _ in range(depth):
        value = {"k": value} if depth % 2 else [value]
    return value


def _cyclic() -> Any:
    """A dict that holds itself: JSON cannot encode it, and walking it never ends."""
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


ODD_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["", " ", "\n", "mail\n", "a b", "\x00", "\x1b[31mred", "\udcff", "é" * 200, "x" * 300]
    ),
)
NUMBERS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 2**63, -(2**63), INT64_MAX, 1e308]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    ODD_TEXT,
)
PAYLOADS = st.one_of(
    st.builds(
        _deep,
        st.sampled_from([1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 500, 990]),
        st.booleans(),
    ),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | ODD_TEXT,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=4),
        max_leaves=20,
    ),
    st.just("x" * (2 * 1024 * 1024)),
    st.just({1, 2}),
    st.just(object()),
    st.builds(_cyclic),
)
OPTIONS = st.dictionaries(
    st.sampled_from(
        [
            "priority",
            "delay",
            "deadline",
            "timeout",
            "max_attempts",
            "retry_safe",
            "correlation_id",
            "idempotency_key",
            "queue",
            "run_after",
            "unknown_option",
        ]
    ),
    NUMBERS,
    max_size=3,
)
KINDS = st.one_of(st.just("k"), ODD_TEXT)


@pytest.fixture(params=["sqlite", "postgres"])
def hostile_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    engine = Engine(open_store(url), kinds={"k": KindPolicy(queue=QUEUE, max_attempts=2)})
    try:
        yield engine
    finally:
        engine.store.close()


@contextmanager
def _serving(engine: Engine, handler: Callable[[Any], Any], concurrency: int) -> Iterator[Worker]:
    """A worker serving QUEUE with `handler` for kind "k", in a thread; stopped (and
    checked gone) when the block ends, whatever happened in it."""
    worker = Worker(
        engine,
        {"k": handler},
        queues=[QUEUE],
        concurrency=concurrency,
        identity=Identity(),
        poll_interval=0.05,
        install_signals=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop(now=True)
        thread.join(15)
    assert not thread.is_alive()


def _submit(engine: Engine, kind: Any, payload: Any, opts: dict[str, Any]) -> Job | None:
    """Submit; a refusal must be a BadInput that names what it refuses."""
    opts = {**opts, "queue": QUEUE} if "queue" not in opts else opts
    try:
        return engine.submit(kind, payload, **opts)
    except BadInput as err:
        refusal = str(err)
    assert refusal, "a refusal says what it refuses"
    return None


def test_hostile_submits_are_stored_and_run_or_refused_and_nothing_else_changes(
    hostile_engine: Engine,
) -> None:
    engine = hostile_engine
    sentinel = engine.submit("k", {"keep": "me"}, queue=QUEUE, delay=3600.0)
    stored: list[Job] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(kind=KINDS, payload=PAYLOADS, opts=OPTIONS, batch=st.booleans())
    def case(kind: Any, payload: Any, opts: dict[str, Any], batch: bool) -> None:
        if batch:  # the hostile item travels with an ordinary one: both or neither
            try:
                jobs = engine.submit_many([("k", 1, {"queue": QUEUE}), (kind, payload, opts)])
            except BadInput:
                jobs = []
            stored.extend(jobs)
        else:
            job = _submit(engine, kind, payload, opts)
            if job is not None:
                stored.append(job)
        assert engine.get(sentinel.id) == sentinel  # nothing already stored changed

    case()

    # a worker serving the queue runs every stored job of its kind to a final state and
    # lives on
    seen: list[Any] = []
    with _serving(engine, lambda ctx: seen.append(ctx.job.id) or "done", 4) as worker:
        assert worker.wait_started(10)
        # the worker leases only kinds it has a handler for: a stored job of another
        # kind waits for a worker that knows it (and is no harm to this one)
        due = [
            j
            for j in stored
            if j.run_after <= time.time() + 1 and j.queue == QUEUE and j.kind == "k"
        ]
        until = time.monotonic() + 60
        while time.monotonic() < until and not all(
            engine.spec.is_final(engine.get(j.id).state) for j in due
        ):
            time.sleep(0.1)
        stuck = [j.id for j in due if not engine.spec.is_final(engine.get(j.id).state)]
        assert not stuck, f"hostile jobs not final: {stuck}"
        ordinary = engine.submit("k", {"after": "the storm"}, queue=QUEUE)
        until = time.monotonic() + 20
        while time.monotonic() < until and engine.get(ordinary.id).state != "succeeded":
            time.sleep(0.05)
        assert engine.get(ordinary.id).state == "succeeded"
        assert worker.ready
        assert engine.get(sentinel.id).state == "queued"


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=ODD_TEXT.filter(lambda s: "\x00" not in s and not s.startswith("-")),
    payload=st.one_of(ODD_TEXT, st.just("[" * 2000 + "]" * 2000), st.just('{"a": NaN}')),
    option=st.sampled_from(
        [
            "--delay",
            "--timeout",
            "--deadline-in",
            "--max-attempts",
            "--priority",
            "--queue",
            "--idempotency-key",
        ]
    ),
    value=st.sampled_from(["nan", "inf", "-1", "0", "1e999", str(2**64), "", "a b", "\n"]),
)
def test_hostile_cli_submits_exit_cleanly(
    sqlite_url: str, kind: str, payload: str, option: str, value: str
) -> None:
    # every refusal is a usage or bad-input error (exit 2) naming the problem, never a
    # traceback; an accepted one prints the job
    result = CliRunner().invoke(
        cli,
        ["submit", kind, "--payload", payload, option, value, "--store", sqlite_url],
        catch_exceptions=True,
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert isinstance(result.exception, BadInput | ValueError), repr(result.exception)
        assert str(result.exception)
    else:
        assert result.exit_code in (0, 2), result.output


def test_a_handler_result_that_holds_itself_fails_its_job_alone(hostile_engine: Engine) -> None:
    """A result JSON cannot encode because it refers to itself ends its own job failed,
    naming the cycle, within the run; the worker goes on with the next job."""
    engine = hostile_engine
    looped = engine.submit("k", {"loop": True}, queue=QUEUE)
    plain = engine.submit("k", {"loop": False}, queue=QUEUE)
    with _serving(engine, lambda ctx: _cyclic() if ctx.payload["loop"] else "done", 1):
        until = time.monotonic() + 20
        while time.monotonic() < until and not all(
            engine.spec.is_final(engine.get(j.id).state) for j in (looped, plain)
        ):
            time.sleep(0.05)
        failed = engine.get(looped.id)
        assert failed.state == "failed"
        assert failed.last_error is not None
        assert "Circular reference" in failed.last_error
        assert engine.get(plain.id).state == "succeeded"
