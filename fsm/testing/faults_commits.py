"""The `commits` fault model: the connection really breaks before or after a statement,
on the blocking store and on its asyncio twin alike.

A store on a network connection cannot always know whether its write committed:
the connection may break after COMMIT reached the server and before the answer
came back. Such a store re-reads from a fresh connection what the write would
have left and answers for it (the unknown-commit rule; for PostgreSQL,
`adapters/postgres/plan.py`'s `write` and `confirmed`, one plan driven blocking
and with `await`). This model breaks the store's own connection for real at the
Nth statement from now on: **before** it (the statement never reaches the
server) or **after** it (it ran, and committed if it was COMMIT or an
autocommitted write, and the answer is lost). The break is a shutdown of the
connection's socket, so the driver raises its own error and reports the
connection broken, as after a network failure; nothing is simulated above it.

Each step drives one operation through the blocking `Engine` or through
`AsyncEngine(path="async")` over the store's asyncio twin (the same plans), with
the break armed, and, when drawn, a concurrent heartbeat that moves the job
between the Engine's read and its write (`FaultyStore`'s racer).

Promises, read back after every step:

- U1 a call that returned a record returned what the store holds: an applied
  audit entry at that version, and the record itself while nobody changed it
  since (a write whose commit was unknown is answered for only if it is there);
  a heartbeat's lease answered as renewed is stored with that owner, fence and
  lease (an explicit example breaks a renew before and after it is sent);
- C1 every trail replays to its record (job and audit written both or neither);
  no job is lost.

Needs a store with a `connection(what)` seam yielding driver connections with
`fileno()` (PostgreSQL); the async steps need an asyncio twin (`HasAsyncStore`).
Other stores are reported as not exercised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar

import hypothesis
from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import JobFSMError
from ..inputs import KindPolicy
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import AsyncStore, HasAsyncStore, ScanRequest, Store
from ..records import Job, Owner
from ..service import maintenance as recovery
from ..service.engine import Engine
from .faults_async import AsyncClient, FaultyAsyncStore, FaultyTwinStore
from .faults_machine import suite_policy
from .faults_models import ModelRun

OWNER = Owner(host="commits-sim", pid=5, incarnation="commits-incarnation")
SYNC_OPS = ("submit", "claim", "start", "succeed", "fail", "cancel", "heartbeat", "sweep")
ASYNC_OPS = ("submit", "cancel", "requeue")
_step = st.tuples(
    st.sampled_from(("sync", "async")),
    st.sampled_from(("drive",) * 4 + SYNC_OPS),
    st.sampled_from(
        (0, 1, 2, 2, 2, 3, 4, 5)
    ),  # the statement that breaks (0: none; 2: the write after a read)
    st.sampled_from(("before", "after")),
    st.booleans(),  # a concurrent heartbeat before the write
    st.integers(0, 7),
)


#: an explicit example (every run): a lease renewed while the connection breaks before
#: the renew reaches the server (it never commits: it must not be answered as renewed)
#: and after it (it committed: it may be)
RENEW_LOST: list[tuple[str, str, int, str, bool, int]] = [
    ("sync", "submit", 0, "before", False, 0),
    ("sync", "claim", 0, "before", False, 0),
    ("sync", "start", 0, "before", False, 0),
    ("sync", "heartbeat", 1, "before", False, 0),
    ("sync", "heartbeat", 1, "after", False, 0),
    ("sync", "heartbeat", 0, "before", False, 0),
]


class BreakPlan:
    """Counts statements; the armed one breaks the connection before or after it."""

    def __init__(self) -> None:
        self.countdown = 0
        self.when = "before"
        self.fired: list[str] = []

    def arm(self, nth: int, when: str) -> None:
        self.countdown, self.when = nth, when

    def due(self, sql: object) -> str | None:
        """'before' or 'after' if this statement is the one that breaks, else None."""
        text = str(sql).lstrip().upper()
        if text.startswith("ROLLBACK") or self.countdown <= 0:
            return None
        self.countdown -= 1
        if self.countdown:
            return None
        self.fired.append(f"{self.when} {text.split(None, 1)[0] if text else '?'}")
        return self.when


#: loggers that warn of every broken connection and its reconcile: here, by design
NOISY = ("psycopg", "psycopg.pool", "adapters.postgres", "fsm.service.dependencies")


@contextmanager
def quiet(names: tuple[str, ...]) -> Iterator[None]:
    """Raise `names`' log level to ERROR while the block runs (restored after)."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def sever(conn: Any) -> None:
    """Shut the connection's socket down (both ways): the driver's next read or write
    fails as after a network failure and it marks the connection broken."""
    dup = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        dup.shutdown(socket.SHUT_RDWR)
    finally:
        dup.close()


class _Breaking:
    """A blocking driver connection whose `execute` may break it (BreakPlan)."""

    def __init__(self, conn: Any, plan: BreakPlan) -> None:
        self.conn = conn
        self.plan = plan

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        when = self.plan.due(sql)
        if when == "before":
            sever(self.conn)
        out = self.conn.execute(sql, *args, **kwargs)
        if when == "after":
            sever(self.conn)
            self.conn.execute("SELECT 1")  # raises the driver's own error
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class _AsyncBreaking(_Breaking):
    """The asyncio twin's connection, same rule."""

    async def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        when = self.plan.due(sql)
        if when == "before":
            sever(self.conn)
        out = await self.conn.execute(sql, *args, **kwargs)
        if when == "after":
            sever(self.conn)
            await self.conn.execute("SELECT 1")
        return out


def install(store: Any, plan: BreakPlan) -> bool:
    """Route the blocking store's connections through `plan`; False without a seam."""
    context = getattr(store, "connection", None)
    if not callable(context) or not isinstance(store, HasAsyncStore):
        return False

    @contextmanager
    def breaking(what: str) -> Iterator[Any]:
        with context(what) as conn:
            yield _Breaking(conn, plan) if hasattr(conn, "fileno") else conn

    target: Any = store  # the seam is replaced on this one handle only
    target.connection = breaking
    return True


def install_async(twin: Any, plan: BreakPlan) -> None:
    context = twin.connection

    @asynccontextmanager
    async def breaking(what: str) -> AsyncIterator[Any]:
        async with context(what) as conn:
            yield _AsyncBreaking(conn, plan)

    twin.connection = breaking


class _BreakingTwin(FaultyTwinStore):
    """The machine's FaultyStore (for the racer), whose twin's connections break too."""

    plan: BreakPlan

    def async_store(self) -> AsyncStore:
        twin = self.twin_of.async_store()
        install_async(twin, self.plan)
        return FaultyAsyncStore(twin, self)


class CommitsModel:
    name: ClassVar[str] = "commits"
    about: ClassVar[str] = "the connection breaks before or after a statement, sync and async"
    examples: ClassVar[dict[str, int]] = {"quick": 8, "default": 60, "thorough": 600}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            reachable = install(opener(), BreakPlan())
        if not reachable:
            ctx.notes.append(
                "commits model not run: the store has no connection seam with driver "
                "connections and no asyncio twin (PostgreSQL has both)"
            )
            return

        @ctx.settings(self.examples[ctx.size])
        @given(st.lists(_step, min_size=3, max_size=14))
        @hypothesis.example(RENEW_LOST)
        def example(steps: list[tuple[str, str, int, str, bool, int]]) -> None:
            with ctx.database() as opener:
                world = _Commits(ctx, opener(), opener())
                try:
                    world.play(steps)
                finally:
                    world.close()

        with quiet(NOISY):
            example()


class _Commits:
    def __init__(self, ctx: ModelRun, store: Store, other: Store) -> None:
        self.ctx = ctx
        self.spec = lifecycle()
        self.clock = FakeClock()
        self.policy = suite_policy()
        self.queue = f"commits-{uuid.uuid4().hex[:12]}"
        self.plan = BreakPlan()
        install(store, self.plan)
        #: the model's own reads (which job to act on, the checks) go through `other`, a
        #: handle whose connections never break: the armed Nth statement is the Engine's
        self.real = other
        self.faulty = _BreakingTwin(store, racer=self._race)
        self.faulty.plan = self.plan
        kinds = {"safe": KindPolicy(queue=self.queue, retry_safe=True, max_attempts=3)}
        self.engine = Engine(self.faulty, clock=self.clock, policy=self.policy, kinds=kinds)
        #: a second process on the same database: the racer's heartbeats
        self.direct = Engine(other, clock=self.clock, policy=self.policy, kinds=kinds)
        self.client = AsyncClient(self.engine)
        self.ids: list[str] = []

    def close(self) -> None:
        self.client.close()

    def _race(self, jid: str) -> str | None:
        job = self.direct.store.get(jid)
        if job is None or job.owner is None or job.state not in ("leased", "running"):
            return None
        self.direct.heartbeat(job.owner, {jid: job.fence})
        return "heartbeat"

    def play(self, steps: list[tuple[str, str, int, str, bool, int]]) -> None:
        for side, drawn, nth, when, race, pick in steps:
            op = self._next(pick) if drawn == "drive" else drawn
            if side == "async" and op not in ASYNC_OPS:
                op = "cancel"  # the async side's operator write, raced by heartbeats
            self.plan.arm(nth, when)
            if race:
                self.faulty.arm_race()
            returned: list[Job] = []
            with contextlib.suppress(JobFSMError):  # an unknown outcome: read back below
                returned = self._op(side, op, pick)
            self.plan.arm(0, "before")
            self.faulty.disarm()
            stats = self.ctx.stats
            for fired in self.plan.fired:
                stats.faults[f"connection broken {fired} ({side} {op})"] += 1
            self.plan.fired.clear()
            stats.faults.update(self.faulty.fired)
            self.faulty.fired.clear()
            self._check(side, op, returned)
        for jid in self.ids:
            self.ctx.coverage.trail(self.real.history(jid))

    def _job(self, pick: int, states: tuple[str, ...]) -> Job | None:
        jobs = [j for j in (self.real.get(i) for i in self.ids) if j and j.state in states]
        return jobs[pick % len(jobs)] if jobs else None

    def _next(self, pick: int) -> str:
        jobs = [j for j in (self.real.get(i) for i in self.ids) if j is not None]
        if not jobs:
            return "submit"
        job = jobs[pick % len(jobs)]
        return {
            "queued": "claim",
            "retry_wait": "sweep",
            "leased": "start",
            "running": ("succeed", "fail", "cancel", "heartbeat")[pick % 4],
            "cancelling": "succeed",
        }.get(job.state, "requeue")

    def _op(self, side: str, op: str, pick: int) -> list[Job]:
        e: Any = self.client if side == "async" else self.engine
        if op == "submit":
            job = e.submit("safe", {"n": pick}, deadline=self.clock.now() + 400.0)
            self.ids.append(job.id)
            return [job]
        if op == "claim":
            return list(self.engine.claim(OWNER, (self.queue,), limit=1 + pick % 2))
        if op == "sweep":
            self.clock.advance(31.0)
            recovery.sweep(self.engine)
            return []
        if op == "heartbeat":
            held = {
                j.id: j.fence
                for j in (self.real.get(i) for i in self.ids)
                if j and j.owner == OWNER and j.state in ("leased", "running", "cancelling")
            }
            # a moment later than any renew before: this one asks for a lease of its own
            self.clock.advance(1.0)
            until = self.clock.now() + self.policy.lease.ttl
            renewed = self.engine.heartbeat(OWNER, held)
            self._renewed(side, renewed, held, until)
            return []
        states = {
            "start": ("leased",),
            "succeed": ("running", "cancelling"),
            "fail": ("running", "cancelling"),
            "cancel": ("queued", "leased", "running", "retry_wait"),
            "requeue": ("failed", "cancelled", "investigate"),
        }[op]
        job = self._job(pick, states)
        if job is None:
            return []
        calls: dict[str, Callable[[], Job]] = {
            "start": lambda: self.engine.start(job.id, job.fence),
            "succeed": lambda: self.engine.succeed(job.id, job.fence, {"ok": True}),
            "fail": lambda: self.engine.fail(job.id, job.fence, "handler raised"),
            "cancel": lambda: e.cancel(job.id, actor="operator", reason="commits model"),
            "requeue": lambda: e.requeue(
                job.id, actor="operator", reason="commits model", attempts=1
            ),
        }
        return [calls[op]()]

    def _renewed(
        self, side: str, renewed: dict[str, str], held: dict[str, int], until: float
    ) -> None:
        """U1 for a heartbeat: every lease it answered as renewed (its commit known or
        confirmed after a broken connection) is stored renewed: this owner, the fence it
        renewed under, the lease it asked for."""
        for jid in renewed:
            stored = self.real.get(jid)
            if stored is None or (stored.owner, stored.fence, stored.lease_until) != (
                OWNER,
                held.get(jid),
                until,
            ):
                raise AssertionError(
                    f"U1 {side} heartbeat answered job {jid}'s lease as renewed under fence "
                    f"{held.get(jid)} until {until}; the store holds "
                    + (
                        "no job"
                        if stored is None
                        else f"fence {stored.fence}, lease until {stored.lease_until}"
                    )
                )
        self.ctx.stats.checks["U1 a renew answered as done is stored (connection broken)"] += 1

    def _check(self, side: str, op: str, returned: list[Job]) -> None:
        listed = self.real.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        for job in listed:
            if job.id not in self.ids:
                self.ids.append(job.id)  # a submit whose answer was lost: it committed
        for job in returned:
            history = self.real.history(job.id)
            stored = self.real.get(job.id)
            entry = any(e.version == job.version and e.outcome == "applied" for e in history)
            if stored is None or not entry or (stored.version == job.version and stored != job):
                raise AssertionError(
                    f"U1 {side} {op} of job {job.id} returned version {job.version} "
                    f"({job.state}) that the store does not hold: stored "
                    f"{None if stored is None else (stored.version, stored.state)}, "
                    f"applied entry at that version: {entry}"
                )
        for jid in self.ids:
            stored = self.real.get(jid)
            if stored is None:
                raise AssertionError(f"I3 job {jid} is lost after a broken connection")
            problems = trail_problems(stored, self.real.history(jid), self.spec, self.policy)
            if problems:
                raise AssertionError(
                    "C1 a broken connection left a job and its audit trail out of step: "
                    + "; ".join(problems)
                )
        checks = self.ctx.stats.checks
        checks["U1 an answered write is what the store holds (connection broken)"] += 1
        checks["C1 job and audit written both or neither (connection broken)"] += 1
