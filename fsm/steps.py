"""The Engine's read-decide-write loops, written once and free of I/O.

Each loop is a generator: it yields a request (`Read` a job, `Write` a decision,
`Record` rejected reports, `Insert` submitted jobs, `Publish` wake-ups), receives
the answer, and returns its result. Every rule lives here: the bounded re-read
after a lost compare-and-set, recording a stale fence's rejected report, the
idempotent repeat of an operator action, which submitted jobs are new. A driver
only carries requests to a store: `drive` calls a blocking store (`Engine`),
`adrive` awaits an async one (`fsm.aio.AsyncEngine` over PostgreSQL's async pool).
So the blocking and the async engine cannot drift apart.

A request whose store call raises has the error thrown back into the loop at
its `yield` (a failed publish is logged there; anything else goes on up).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .errors import BadInput, IllegalTransition, JobNotFound, LeaseLost, VersionConflict
from .lifecycle.core import decide
from .observe import log_transition
from .ports import Capacity, JoinsTransactions
from .records import AuditEntry, Decision, Job

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@attrs.frozen
class Read:
    """Answer: the stored job, or None."""

    job_id: str


@attrs.frozen
class Write:
    """Answer: the written job, or the VersionConflict of a lost compare-and-set."""

    decision: Decision


@attrs.frozen
class Record:
    """Append audit entries that change no job (a rejected report). Answer: None."""

    entries: tuple[AuditEntry, ...]


@attrs.frozen
class Insert:
    """Answer: the stored jobs, in order (`Store.insert`; with `conn`, the caller's
    open transaction: `JoinsTransactions.insert_in`)."""

    decisions: tuple[Decision, ...]
    capacity: Capacity | None
    conn: Any = None


@attrs.frozen
class Release:
    """Offer the waiting dependents of written jobs (and written jobs that wait) their
    release (`fsm.dependencies.Releaser.settled`). Answer: the jobs released."""

    jobs: tuple[Job, ...]


@attrs.frozen
class Publish:
    """Tell the delivery that jobs arrived. Answer: None."""

    jobs: tuple[Job, ...]


Request = Read | Write | Record | Insert | Release | Publish
Steps = Generator[Request, Any, T]


def decided(engine: Engine, job_id: str, event: str, args: Mapping[str, Any]) -> Steps[Job]:
    """Read, `decide`, write with compare-and-set; re-read on a lost race, at most
    `limits.cas_retries` times. A stale fence records the rejected report and raises
    LeaseLost."""
    for _ in range(engine.policy.limits.cas_retries):
        job = yield Read(job_id)
        if job is None:
            raise JobNotFound(job_id)
        now = engine.clock.now()
        try:
            decision = decide(job, event, now, engine.policy, spec=engine.spec, **args)
        except LeaseLost as err:
            entry: AuditEntry = err.entry  # type: ignore[attr-defined]
            yield Record((entry,))
            log_transition(job, entry)
            if engine.metrics is not None:
                engine.metrics.rejected_report(job.kind, event)
            raise
        outcome = yield Write(decision)
        if isinstance(outcome, VersionConflict):
            continue
        if decision.entry is not None:
            engine._observe(outcome, decision.entry)
        return outcome  # type: ignore[no-any-return]
    raise VersionConflict(job_id, -1, None)


def operator(
    engine: Engine,
    job_id: str,
    event: str,
    settled: Callable[[Job], bool],
    args: Mapping[str, Any],
) -> Steps[Job]:
    """An operator event, in its span; repeating one that already took effect is a no-op."""
    with engine._operator_span(event, job_id, args["actor"]):
        try:
            job = yield from decided(engine, job_id, event, args)
        except IllegalTransition:
            job = yield Read(job_id)
            if job is None:
                raise JobNotFound(job_id) from None
            if settled(job):
                return job  # type: ignore[no-any-return]
            raise
        if engine.releaser is not None:  # a prerequisite that ended lets its dependents go
            yield Release((job,))
        return job


def cancel(engine: Engine, job_id: str, *, actor: str, reason: str) -> Steps[Job]:
    """`Engine.cancel`: a repeat on a job already cancelled (or cancelling) is a no-op."""
    done = engine._dests("cancel")
    args = {"actor": actor, "reason": reason}
    return (yield from operator(engine, job_id, "cancel", lambda j: j.state in done, args))


def requeue(engine: Engine, job_id: str, *, actor: str, reason: str, attempts: int) -> Steps[Job]:
    """`Engine.requeue`: never a no-op (each requeue grants a fresh attempt budget)."""
    args = {"actor": actor, "reason": reason, "attempts": attempts}
    return (yield from operator(engine, job_id, "requeue", lambda j: False, args))


def resolve(
    engine: Engine, job_id: str, *, outcome: str, actor: str, reason: str, result: Any
) -> Steps[Job]:
    """`Engine.resolve`: a repeat on a job already in `outcome` is a no-op."""
    args = {
        "outcome": outcome,
        "actor": actor,
        "reason": reason,
        "result_json": engine._result_json(job_id, result),
    }
    return (yield from operator(engine, job_id, "resolve", lambda j: j.state == outcome, args))


def erase(engine: Engine, job_id: str, args: Mapping[str, Any]) -> Steps[Job]:
    """`erase` in its operator span; the driver writes with the store's `erase`."""
    with engine._operator_span("erase", job_id, args["actor"]):
        return (yield from decided(engine, job_id, "erase", args))


def submit_many(
    engine: Engine, items: Iterable[tuple[str, Any, Mapping[str, Any]]], conn: Any = None
) -> Steps[list[Job]]:
    """Validate and decide every job before any write, insert them in one request,
    observe the new ones, release at once those whose prerequisites already finished,
    and publish the ones that can be leased (a failed publish is logged: the store is
    the truth, and a sweep republishes lost wake-ups). With `conn` (the caller's
    transaction, not committed yet) nothing is released or published here."""
    now = engine.clock.now()
    decisions = tuple(engine._submit_decision(now, k, p, **dict(o)) for k, p, o in items)
    waits = any(d.prerequisites for d in decisions)
    if engine.releaser is None and waits:
        raise BadInput(
            f"{type(engine.store).__name__} keeps no dependencies: submit with after= "
            "needs a store that does (memory, SQLite, PostgreSQL)"
        )
    caps = engine.policy.limits.queue_capacity
    capacity = Capacity(caps, engine._lease_states) if caps else None
    jobs: list[Job] = yield Insert(decisions, capacity, conn)
    fresh = []
    for decision, job in zip(decisions, jobs, strict=True):
        if job.id == decision.job.id and decision.entry is not None:
            engine._observe(job, decision.entry)
            fresh.append(job)
    if conn is not None:
        return jobs
    if waits and fresh:
        # a waiting job gets no wake-up here: its release announces it (the ones
        # released just now were announced by the releaser)
        released: list[Job] = yield Release(tuple(fresh))
        done = {j.id: j for j in released}
        jobs = [done.get(j.id, j) for j in jobs]
        fresh = [j for j in fresh if j.id not in done and j.state in engine._lease_states]
    if fresh and engine.publisher is not None:
        try:
            yield Publish(tuple(fresh))
        except Exception:
            log.warning(
                "publishing %d new jobs failed; sweeps will repair", len(fresh), exc_info=True
            )
    return jobs


def drive(steps: Generator[R, Any, T], perform: Callable[[R], Any]) -> T:
    """Run `steps`, answering each request with `perform(request)`."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, error = perform(request), None
        except BaseException as err:
            answer, error = None, err


async def adrive(steps: Generator[R, Any, T], perform: Callable[[R], Awaitable[Any]]) -> T:
    """Run `steps`, answering each request with `await perform(request)`."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, error = await perform(request), None
        except BaseException as err:  # cancellation too: the loop's `with` blocks unwind
            answer, error = None, err


def sync_performer(
    engine: Engine, write: Callable[[Decision], Job | VersionConflict] | None = None
) -> Callable[[Request], Any]:
    """Answer requests from the engine's blocking store; `write` (default: `apply`)."""
    store = engine.store

    def perform(request: Request) -> Any:
        if isinstance(request, Read):
            return store.get(request.job_id)
        if isinstance(request, Write):
            if write is not None:
                return write(request.decision)
            return store.apply([request.decision])[0]
        if isinstance(request, Record):
            store.record(list(request.entries))
            return None
        if isinstance(request, Insert):
            if request.conn is None:
                return store.insert(list(request.decisions), request.capacity)
            if not isinstance(store, JoinsTransactions):
                raise BadInput(
                    f"{type(store).__name__} cannot submit inside a caller's transaction "
                    "(conn=...): use a SQLite or PostgreSQL store"
                )
            return store.insert_in(request.conn, list(request.decisions), request.capacity)
        if isinstance(request, Release):
            assert engine.releaser is not None
            return engine.releaser.settled(request.jobs)
        assert engine.publisher is not None
        engine.publisher.publish(list(request.jobs))
        return None

    return perform
