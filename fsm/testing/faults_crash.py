"""The `crash` fault model: the store's connection dies before its Nth statement.

A store promises that a transition and its audit entry are written together:
both or neither. This model makes that promise face crash points *inside* a
store call: the Nth statement the store sends from now on (the job's UPDATE,
the audit INSERT, the COMMIT, ...) raises `InjectedCrash` instead of reaching
the database, as if the process or its connection died right there. The store
must roll back whatever that call began; the engine sees an unknown outcome.

After every operation, crashed or not, every job's record must replay from its
trail (`trail_problems`: C1 a job written without its audit entry, or an entry
without its job, shows as I6/I8), and no job may exist that the model cannot
account for.

Reaching the statements needs the store's connection seam: a method that hands
out its driver connection (`connection(what)` as a context manager, as the
PostgreSQL store has), or the `fsm.ports.WrapsConnections` capability (the SQLite
store's `wrap_connections`).
The connection is wrapped, never the driver: `fsm` imports no driver. A store
without such a seam (the memory store has no statements) is reported as not
exercised by this model.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import JobFSMError, TransientStoreError
from ..inputs import KindPolicy
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest, Store, WrapsConnections
from ..records import Owner
from ..service import maintenance as recovery
from ..service.engine import Engine
from .faults_machine import suite_policy
from .faults_models import ModelRun

OWNER = Owner(host="crash-sim", pid=3, incarnation="crash-incarnation")
OPS = ("submit", "claim", "start", "succeed", "fail", "cancel", "heartbeat", "sweep", "requeue")


class InjectedCrash(TransientStoreError):
    """The connection died before this statement reached the database."""


class CrashPlan:
    """Counts the statements a store sends; the armed one raises before it is sent."""

    def __init__(self) -> None:
        self.countdown = 0
        self.fired: list[str] = []

    def arm(self, nth: int) -> None:
        self.countdown = nth

    def tick(self, sql: object) -> None:
        text = str(sql).lstrip().upper()
        if text.startswith("ROLLBACK") or self.countdown <= 0:
            return  # the store's own cleanup always runs
        self.countdown -= 1
        if self.countdown == 0:
            verb = text.split(None, 1)[0] if text else "?"
            self.fired.append(verb)
            raise InjectedCrash(f"injected crash before a {verb} statement reached the store")


class _CrashingConnection:
    """A driver connection whose execute/executemany pass through a CrashPlan first."""

    def __init__(self, conn: Any, plan: CrashPlan) -> None:
        self._conn = conn
        self._plan = plan

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        self._plan.tick(sql)
        return self._conn.execute(sql, *args, **kwargs)

    def executemany(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        self._plan.tick(sql)
        return self._conn.executemany(sql, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _crashing(context: Callable[[str], Any], plan: CrashPlan) -> Callable[[str], Any]:
    @contextmanager
    def crashing(what: str) -> Iterator[Any]:
        with context(what) as conn:
            yield _CrashingConnection(conn, plan)

    return crashing


def install(store: Store, plan: CrashPlan) -> bool:
    """Route `store`'s statements through `plan`; False if it has no connection seam."""
    target: Any = store
    context = getattr(target, "connection", None)
    if callable(context):
        target.connection = _crashing(context, plan)
        return True
    if isinstance(store, WrapsConnections):
        store.wrap_connections(lambda conn: _CrashingConnection(conn, plan))
        return True
    return False


#: how far into a call a crash may land: every statement of the longest store call
#: (a read, BEGIN, the job write, the audit write, COMMIT) has its turn
CRASH_POINTS = tuple(range(9))
_ops = st.lists(
    st.tuples(
        st.sampled_from(OPS + ("drive",) * 6),  # mostly: move a job one step along its path
        st.sampled_from(CRASH_POINTS),  # uniform: a late statement is as likely as an early one
        st.integers(0, 7),
    ),
    min_size=3,
    max_size=16,
)


class CrashModel:
    name: ClassVar[str] = "crash"
    about: ClassVar[str] = "the connection dies before the Nth statement of a store call"
    examples: ClassVar[dict[str, int]] = {"quick": 15, "default": 300, "thorough": 3000}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            reachable = install(opener(), CrashPlan())
        if not reachable:
            ctx.notes.append(
                "crash model not run: the store has no connection seam (connection or "
                "wrap_connections) through which a crash between its statements can be injected"
            )
            return

        @ctx.settings(self.examples[ctx.size])
        @given(_ops)
        def example(ops: list[tuple[str, int, int]]) -> None:
            with ctx.database() as opener:
                _Crash(ctx, opener()).play(ops)

        example()


class _Crash:
    def __init__(self, ctx: ModelRun, store: Store) -> None:
        self.ctx = ctx
        self.spec = lifecycle()
        self.clock = FakeClock()
        self.policy = suite_policy()
        self.queue = f"crash-{uuid.uuid4().hex[:12]}"
        self.store = store
        self.plan = CrashPlan()
        install(store, self.plan)
        kinds = {
            "safe": KindPolicy(queue=self.queue, retry_safe=True, max_attempts=3),
            "unsafe": KindPolicy(queue=self.queue, retry_safe=False, max_attempts=3),
        }
        self.engine = Engine(store, clock=self.clock, policy=self.policy, kinds=kinds)
        self.ids: list[str] = []
        self.n = 0

    def play(self, ops: list[tuple[str, int, int]]) -> None:
        for op, nth, pick in ops:
            self.plan.arm(nth)
            # an unknown outcome: the checks below read what is stored
            with contextlib.suppress(JobFSMError, InjectedCrash):
                self._op(op, pick)
            self.plan.arm(0)
            for verb in self.plan.fired:
                self.ctx.stats.faults[f"crash: connection died before {verb} ({op})"] += 1
            self.plan.fired.clear()
            self._check()
        for jid in self.ids:
            self.ctx.coverage.trail(self.store.history(jid))

    def _job(self, pick: int, states: tuple[str, ...]) -> Any:
        jobs = [j for j in (self.store.get(i) for i in self.ids) if j and j.state in states]
        return jobs[pick % len(jobs)] if jobs else None

    def _op(self, op: str, pick: int) -> None:
        e = self.engine
        if op == "drive":
            op = self._next_step(pick)
        if op == "submit":
            self.n += 1
            kind = "safe" if pick % 2 else "unsafe"
            e.submit(kind, {"n": self.n}, deadline=self.clock.now() + 400.0)
        elif op == "claim":
            e.claim(OWNER, (self.queue,), limit=1 + pick % 3)
        elif op == "sweep":
            self.clock.advance(31.0)
            recovery.sweep(e)
        elif op == "heartbeat":
            held = {
                j.id: j.fence
                for j in (self.store.get(i) for i in self.ids)
                if j and j.owner == OWNER and j.state in ("leased", "running", "cancelling")
            }
            e.heartbeat(OWNER, held)
        elif op == "start":
            job = self._job(pick, ("leased",))
            if job is not None:
                e.start(job.id, job.fence)
        elif op in ("succeed", "fail"):
            job = self._job(pick, ("running", "cancelling"))
            if job is not None:
                if op == "succeed":
                    e.succeed(job.id, job.fence, {"ok": True})
                else:
                    e.fail(job.id, job.fence, "handler raised")
        elif op == "cancel":
            job = self._job(pick, ("queued", "leased", "running", "retry_wait"))
            if job is not None:
                e.cancel(job.id, actor="operator", reason="crash model")
        elif op == "requeue":
            job = self._job(pick, ("failed", "cancelled", "investigate"))
            if job is not None:
                e.requeue(job.id, actor="operator", reason="crash model", attempts=1)

    def _next_step(self, pick: int) -> str:
        """The op that moves a job (chosen by `pick`) one step along its usual path."""
        jobs = [j for j in (self.store.get(i) for i in self.ids) if j is not None]
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

    def _check(self) -> None:
        listed = self.store.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        for job in listed:
            if job.id not in self.ids:
                self.ids.append(job.id)  # a submit whose reply was lost: it committed
        for jid in self.ids:
            stored = self.store.get(jid)
            if stored is None:
                raise AssertionError(f"I3 job {jid} is lost after a crash")
            problems = trail_problems(stored, self.store.history(jid), self.spec, self.policy)
            if problems:
                raise AssertionError(
                    "C1 a crash left a job and its audit trail out of step: " + "; ".join(problems)
                )
        self.ctx.stats.checks["C1 job and audit written both or neither (after a crash)"] += 1
