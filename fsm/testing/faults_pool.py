"""The `pool` fault model: many failing calls in a row on ONE long-lived asyncio store,
then a liveness promise.

`AsyncEngine(path="async")` runs every store call on the store's asyncio twin
(PostgreSQL: `adapters/postgres/aio.py`), which gives each call a turn at its pool (a
slot of a semaphore of `pool_max`, then a pooled connection, inside a transaction).
A call that fails must give all three back: a turn kept on error is invisible to one
failing call, and after `pool_max` of them every further call waits until it times
out. So each example keeps one Engine, one AsyncEngine, one event loop and one twin
for its whole life, and makes 3 to 12 calls (submit, cancel, requeue, get), most of
them failing in one of the ways a real deployment sees:

- the connection breaks **before** the Nth statement of the call (its socket shut
  down: the driver's own error, the connection marked broken) or **after** it (it
  ran, perhaps committed, and the answer is lost);
- the Nth statement fails on the server (a division by zero: an SQL error on a
  healthy connection, inside the call's transaction);
- the awaiting task is **cancelled** (a timeout around the call) while the Nth
  statement is in flight;
- a **crowd**: `pool_max + 1` calls at once whose statements hang, all cancelled
  while the first ones hold the pool's turns and the last waits for one.

Promises, after every call and at the end of the example:

- B1 live: after each call the store serves the next one, and once the failing
  calls are done `pool_max + 1` calls at once and then one more, each within `BOUND`
  seconds (a pool turn, a connection or a transaction kept by a failed call makes
  them wait, then fail);
- B2 bounded: the twin's pool never holds more connections than its `pool_max`.

Needs a store with an asyncio twin (`HasAsyncStore`) whose connections have
`fileno()` (PostgreSQL); other stores are reported as not exercised.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import hypothesis
from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import JobFSMError
from ..inputs import KindPolicy
from ..ports import HasAsyncStore, Store
from ..records import Job
from ..service.aio import AsyncEngine
from ..service.engine import Engine
from .faults_commits import NOISY, quiet, sever
from .faults_machine import suite_policy
from .faults_models import ModelRun

#: seconds within which a call must be served once the failures are done (B1); the
#: pool's own wait (`pool_timeout`, 10 s by default) is longer, so a kept turn shows
BOUND = 5.0
#: seconds a cancelled call is given before its task is cancelled
CANCEL_AFTER = 0.05
MODES = ("ok", "before", "after", "error", "cancel", "crowd")
OPS = ("submit", "cancel", "requeue", "get")
#: a step: how the call fails, which call, its Nth statement (1 = the first)
Step = tuple[str, str, int]
_step = st.tuples(
    st.sampled_from(MODES[1:] * 3 + MODES[:1]),  # mostly failing calls
    st.sampled_from(OPS),
    st.integers(1, 3),
)

#: explicit examples (every run): each way of failing, several times in a row, more
#: times than the pool has turns
EVERY_FAILURE: list[Step] = [
    *(("before", op, 1) for op in ("submit", "get", "cancel")),
    *(("after", op, 2) for op in ("submit", "cancel", "requeue")),
    *(("error", op, 1) for op in ("submit", "get", "cancel")),
    *(("cancel", op, 1) for op in ("submit", "get", "requeue")),
    ("crowd", "submit", 1),
    ("crowd", "get", 1),
]


class Arm:
    """The fault armed for the next call: its mode and the statement it strikes."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.countdown = 0
        self.fired: list[str] = []

    def set(self, mode: str, nth: int) -> None:
        self.mode, self.countdown = mode, (0 if mode == "ok" else nth)

    def due(self, sql: object) -> str | None:
        text = str(sql).lstrip().upper()
        if text.startswith("ROLLBACK") or self.countdown <= 0:
            return None
        if self.mode != "crowd":  # a crowd's calls all hang at their first statement
            self.countdown -= 1
            if self.countdown:
                return None
        self.fired.append(self.mode)
        return self.mode


class _Failing:
    """An asyncio driver connection whose armed statement fails as `Arm` says."""

    def __init__(self, conn: Any, arm: Arm) -> None:
        self.conn = conn
        self.arm = arm

    async def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        mode = self.arm.due(sql)
        if mode == "before":
            sever(self.conn)
        elif mode == "error":
            return await self.conn.execute("SELECT 1 / 0")  # the server refuses it
        elif mode in ("cancel", "crowd"):
            await asyncio.sleep(BOUND * 4)  # in flight until the task is cancelled
        out = await self.conn.execute(sql, *args, **kwargs)
        if mode == "after":
            sever(self.conn)
            await self.conn.execute("SELECT 1")  # raises the driver's own error
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class PoolModel:
    name: ClassVar[str] = "pool"
    about: ClassVar[str] = "many failing calls on one asyncio store, then a call within a bound"
    examples: ClassVar[dict[str, int]] = {"quick": 4, "default": 12, "thorough": 120}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            reachable = isinstance(opener(), HasAsyncStore)
        if not reachable:
            ctx.notes.append("pool model not run: the store has no asyncio twin (PostgreSQL has)")
            return

        @ctx.settings(self.examples[ctx.size])
        @given(st.lists(_step, min_size=3, max_size=12))
        @hypothesis.example(EVERY_FAILURE)
        def example(steps: list[Step]) -> None:
            run_example(ctx, steps)

        with quiet((*NOISY, "asyncio")):
            example()


def run_example(ctx: ModelRun, steps: list[Step]) -> None:
    """One example (`EVERY_FAILURE`, or a drawn one) on a fresh database of `ctx`."""
    with ctx.database() as opener:
        world = _World(ctx, opener())
        try:
            world.play(steps)
        finally:
            world.close()


class _World:
    def __init__(self, ctx: ModelRun, store: Store) -> None:
        self.ctx = ctx
        self.clock = FakeClock()
        self.queue = f"pool-{uuid.uuid4().hex[:12]}"
        kinds = {"pool.job": KindPolicy(queue=self.queue, retry_safe=True, max_attempts=3)}
        engine = Engine(store, clock=self.clock, policy=suite_policy(), kinds=kinds)
        self.loop = asyncio.new_event_loop()
        self.aengine = AsyncEngine(engine, max_threads=2, path="async")
        self.arm = Arm()
        self.twin: Any = self.loop.run_until_complete(self._install())
        self.ids: list[str] = []
        self.ended: list[str] = []  # jobs cancelled: requeue goes to these

    async def _install(self) -> Any:
        """The AsyncEngine's twin, its connections routed through `Arm`."""
        twin: Any = await self.aengine.twin()
        context = twin.connection

        @asynccontextmanager
        async def failing(what: str) -> AsyncIterator[Any]:
            async with context(what) as conn:
                yield _Failing(conn, self.arm)

        twin.connection = failing
        return twin

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.aengine.aclose())
        finally:
            self.loop.close()

    def play(self, steps: list[Step]) -> None:
        faults = self.ctx.stats.faults
        for i, (mode, op, nth) in enumerate(steps):
            self.arm.set(mode, nth)
            self.loop.run_until_complete(self._step(mode, op, i))
            self.arm.set("ok", 0)
            for fired in self.arm.fired:
                faults[f"pool: a {op} call failed ({fired})"] += 1
            self.arm.fired.clear()
            self._bounded(f"after step {i} ({mode} {op})")
            self.loop.run_until_complete(self._live(steps[: i + 1], [self._submit]))
        turns = self._turns()
        for batch in ([self._submit] * (turns + 1), [self._submit]):
            self.loop.run_until_complete(self._live(steps, batch))
        self._bounded("at the end")
        self.ctx.stats.examples += 1

    async def _step(self, mode: str, op: str, i: int) -> None:
        if mode == "crowd":
            turns = self._turns()
            crowd = [asyncio.ensure_future(self._call(op, i)) for _ in range(turns + 1)]
            await asyncio.sleep(CANCEL_AFTER * 4)  # the first hold turns, the last waits
            for task in crowd:
                task.cancel()
            await asyncio.gather(*crowd, return_exceptions=True)
            return
        if mode == "cancel":
            with contextlib.suppress(TimeoutError, JobFSMError):
                await asyncio.wait_for(self._call(op, i), CANCEL_AFTER)
            return
        with contextlib.suppress(JobFSMError):  # the call failed: what B1, B2 check
            await self._call(op, i)

    async def _call(self, op: str, i: int) -> None:
        a = self.aengine
        if op == "submit" or not self.ids:
            job = await a.submit("pool.job", {"n": i}, deadline=self.clock.now() + 600.0)
            self.ids.append(job.id)
        elif op == "get":
            await a.get(self.ids[i % len(self.ids)])
        elif op == "cancel":
            jid = self.ids[i % len(self.ids)]
            await a.cancel(jid, actor="operator", reason="pool model")
            self.ended.append(jid)
        elif self.ended:
            jid = self.ended[i % len(self.ended)]
            await a.requeue(jid, actor="operator", reason="pool model", attempts=1)

    def _turns(self) -> int:
        settings = getattr(self.twin, "settings", None)
        return int(getattr(settings, "pool_max", 2))

    def _bounded(self, when: str) -> None:
        stats = getattr(getattr(self.twin, "pool", None), "get_stats", None)
        if stats is None:
            return
        held = int(stats().get("pool_size", 0))
        if held > self._turns():
            raise AssertionError(
                f"B2 the asyncio store's pool holds {held} connections {when}; its max is "
                f"{self._turns()}"
            )
        self.ctx.stats.checks["B2 the asyncio pool holds no more than its max"] += 1

    async def _live(
        self, steps: list[Step], batch: Sequence[Callable[[], Awaitable[Job | None]]]
    ) -> None:
        """B1: the calls of `batch`, at once, each served within BOUND."""
        failed = sum(1 for mode, _, _ in steps if mode != "ok")
        try:
            async with asyncio.timeout(BOUND):
                done = await asyncio.gather(*(c() for c in batch))
        except (TimeoutError, JobFSMError) as err:
            raise AssertionError(
                f"B1 after {failed} failing calls on one asyncio store, {len(batch)} "
                f"call(s) at once were not served within {BOUND:g} s: "
                f"{type(err).__name__}: {err} (a failed call kept its pool turn, "
                "connection or transaction)"
            ) from None
        if any(job is None for job in done):
            raise AssertionError("B1 a call served after the failures lost its job")
        self.ctx.stats.checks["B1 the asyncio store serves a call within the bound"] += 1
        if len(batch) > 1:
            self.ctx.stats.faults[f"pool: an example of {failed} failing steps"] += 1

    async def _submit(self) -> Job | None:
        job = await self.aengine.submit("pool.job", {"live": True})
        return await self.aengine.get(job.id)
