"""The service's read-decide-write loops, written once and free of I/O.

Each plan is a generator over a `Kernel`: it yields a request (`Read` a job, `Write`
a decision, `Record` a rejected report, `Insert` submitted jobs, `Release` waiting
dependents, `Publish` wake-ups), receives the answer, and returns its result. Every
rule lives here: the bounded re-read after a lost compare-and-set, recording a stale
fence's rejected report, the idempotent repeat of an operator action, which submitted
jobs are new and which may be announced. `drive` and `adrive` run a plan; a
performer (`fsm.service.drivers`) only carries requests to a store, blocking
(`Engine`) or awaited (`AsyncEngine` over PostgreSQL's async pool), and tells the
observers of what it wrote. So the blocking
and the async engine cannot drift apart, and a plan knows nothing above it.

A request whose store call raises has the error thrown back into the plan at its
`yield` (a failed publish is logged there; anything else goes on up).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from ..errors import BadInput, IllegalTransition, JobNotFound, LeaseLost, VersionConflict
from ..records import AuditEntry, Decision, Job
from .kernel import Kernel

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@attrs.frozen
class Read:
    """Answer: the stored job, or None."""

    job_id: str


@attrs.frozen
class Write:
    """Answer: the written job, or the VersionConflict of a lost compare-and-set.
    `erase`: write with the store's `erase` (the job's earlier data blanked too)."""

    decision: Decision
    erase: bool = False


@attrs.frozen
class Record:
    """Append a rejected report's audit entry (it changes no job). Answer: None."""

    job: Job
    entry: AuditEntry


@attrs.frozen
class Insert:
    """Answer: the stored jobs, in order (`Store.insert`; with `conn`, the caller's open
    transaction: `JoinsTransactions.insert_in`). Queue capacities are the kernel's."""

    decisions: tuple[Decision, ...]
    conn: Any = None


@attrs.frozen
class Release:
    """Offer the waiting dependents of written jobs (and written jobs that wait) their
    release (`fsm.service.dependencies.settled`). Answer: the jobs released."""

    jobs: tuple[Job, ...]


@attrs.frozen
class Publish:
    """Tell the kernel's publisher that jobs arrived. Answer: None."""

    jobs: tuple[Job, ...]


Request = Read | Write | Record | Insert | Release | Publish
Plan = Generator[Request, Any, T]


def decided(
    kernel: Kernel, job_id: str, event: str, args: Mapping[str, Any], *, erase: bool = False
) -> Plan[Job]:
    """Read, `decide`, write with compare-and-set; re-read on a lost race, at most
    `limits.cas_retries` times. A stale fence records the rejected report and raises
    LeaseLost."""
    for _ in range(kernel.policy.limits.cas_retries):
        job = yield Read(job_id)
        if job is None:
            raise JobNotFound(job_id)
        try:
            decision = kernel.decide(job, event, kernel.clock.now(), **args)
        except LeaseLost as err:
            entry: AuditEntry = err.entry  # type: ignore[attr-defined]
            yield Record(job, entry)
            raise
        outcome = yield Write(decision, erase)
        if isinstance(outcome, VersionConflict):
            continue
        return outcome  # type: ignore[no-any-return]
    raise VersionConflict(job_id, -1, None)


def transition(kernel: Kernel, job_id: str, event: str, args: Mapping[str, Any]) -> Plan[Job]:
    """`decided`, then the release of what the written job lets go."""
    job = yield from decided(kernel, job_id, event, args)
    if kernel.releases:
        yield Release((job,))
    return job


def reconcile(
    kernel: Kernel,
    job_id: str,
    fence: int,
    answer: str,
    *,
    result: Any = None,
    until: float | None = None,
    failure: str | None = None,
    why: str | None = None,
) -> Plan[Job]:
    """Record a reconciler's answer for a lost run (`fsm.service.reconcile`); `failure`
    (with answer "unknown") says the reconciler itself failed. A "done" result that is
    not JSON raises BadInput before anything is written."""
    args: dict[str, Any] = {"fence": fence, "answer": answer}
    if answer == "done":
        args["result_json"] = kernel.result_json(job_id, result)
    for key, value in (("until", until), ("failure", failure), ("why", why)):
        if value is not None:
            args[key] = value
    return (yield from transition(kernel, job_id, "reconcile", args))


def operator(
    kernel: Kernel,
    job_id: str,
    event: str,
    settled: Callable[[Job], bool],
    args: Mapping[str, Any],
) -> Plan[Job]:
    """An operator event, observed as one action; repeating one that already took
    effect is a no-op."""
    with kernel.observers.operator(event, job_id, args["actor"]):
        try:
            job = yield from decided(kernel, job_id, event, args)
        except IllegalTransition:
            job = yield Read(job_id)
            if job is None:
                raise JobNotFound(job_id) from None
            if settled(job):
                return job  # type: ignore[no-any-return]
            raise
        if kernel.releases:  # a prerequisite that ended lets its dependents go
            yield Release((job,))
        return job


def cancel(kernel: Kernel, job_id: str, *, actor: str, reason: str) -> Plan[Job]:
    """`Engine.cancel`: a repeat on a job already cancelled (or cancelling) is a no-op."""
    done = kernel.spec.dests("cancel")
    args = {"actor": actor, "reason": reason}
    return (yield from operator(kernel, job_id, "cancel", lambda j: j.state in done, args))


def requeue(kernel: Kernel, job_id: str, *, actor: str, reason: str, attempts: int) -> Plan[Job]:
    """`Engine.requeue`: never a no-op (each requeue grants a fresh attempt budget)."""
    args = {"actor": actor, "reason": reason, "attempts": attempts}
    return (yield from operator(kernel, job_id, "requeue", lambda j: False, args))


def resolve(
    kernel: Kernel, job_id: str, *, outcome: str, actor: str, reason: str, result: Any
) -> Plan[Job]:
    """`Engine.resolve`: a repeat on a job already in `outcome` is a no-op."""
    args = {
        "outcome": outcome,
        "actor": actor,
        "reason": reason,
        "result_json": kernel.result_json(job_id, result),
    }
    return (yield from operator(kernel, job_id, "resolve", lambda j: j.state == outcome, args))


def erase(kernel: Kernel, job_id: str, *, actor: str, reason: str) -> Plan[Job]:
    """`Engine.erase`, observed as an operator action; written with the store's erase."""
    with kernel.observers.operator("erase", job_id, actor):
        args = {"actor": actor, "reason": reason}
        return (yield from decided(kernel, job_id, "erase", args, erase=True))


def submit_many(
    kernel: Kernel, items: Iterable[tuple[str, Any, Mapping[str, Any]]], conn: Any = None
) -> Plan[list[Job]]:
    """Validate and decide every job before any write, insert them in one request,
    release at once those whose prerequisites already finished, and publish the new
    ones that can be leased (a failed publish is logged: the store is the truth, and a
    sweep republishes lost wake-ups). With `conn` (the caller's transaction, not
    committed yet) nothing is released or published here."""
    now = kernel.clock.now()
    decisions: list[Decision] = []
    for n, item in enumerate(items):
        if not (isinstance(item, tuple | list) and len(item) == 3):
            raise BadInput(
                f"submit_many: item {n} must be a (kind, payload, options) tuple; got {item!r:.80}"
            )
        kind, payload, opts = item
        if not isinstance(opts, Mapping):
            raise BadInput(f"submit_many: item {n}: options must be a mapping; got {opts!r:.80}")
        decisions.append(kernel.submit_decision(now, kind, payload, **opts))
    waits = any(d.prerequisites for d in decisions)
    if waits and not kernel.releases:
        raise BadInput(
            f"{type(kernel.store).__name__} keeps no dependencies: submit with after= "
            "needs a store that does (memory, SQLite, PostgreSQL)"
        )
    jobs: list[Job] = yield Insert(tuple(decisions), conn)
    if conn is not None:
        return jobs
    fresh = [j for d, j in zip(decisions, jobs, strict=True) if j.id == d.job.id]
    if waits and fresh:
        # a waiting job gets no wake-up here: its release announces it (the ones
        # released just now were announced by the release)
        released: list[Job] = yield Release(tuple(fresh))
        done = {j.id: j for j in released}
        jobs = [done.get(j.id, j) for j in jobs]
        fresh = [j for j in fresh if j.id not in done and j.state in kernel.lease_states]
    if fresh and kernel.publisher is not None:
        try:
            yield Publish(tuple(fresh))
        except Exception:
            log.warning(
                "publishing %d new jobs failed; sweeps will repair", len(fresh), exc_info=True
            )
    return jobs


# --- running plans ---------------------------------------------------------------


def drive(plan: Generator[R, Any, T], perform: Callable[[R], Any]) -> T:
    """Run `plan`, answering each request with `perform(request)`."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = plan.send(answer) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, error = perform(request), None
        except BaseException as err:
            answer, error = None, err


async def adrive(plan: Generator[R, Any, T], perform: Callable[[R], Awaitable[Any]]) -> T:
    """Run `plan`, answering each request with `await perform(request)`."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = plan.send(answer) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            answer, error = await perform(request), None
        except BaseException as err:  # cancellation too: the plan's `with` blocks unwind
            answer, error = None, err
