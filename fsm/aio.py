"""AsyncEngine: the Engine for asyncio code, without blocking the event loop.

Every method runs the same `Engine` method on a bounded pool of threads
(`max_threads`), so each write goes through the same `decide`, the same fenced
compare-and-set and the same audit as a blocking call: there is no second copy
of the lifecycle. The store's own bounds still hold (PostgreSQL: its connection
pool, `pool_max`); `max_threads` bounds how many calls wait for it at once.

`wait` holds no thread while it waits: on a store that `WatchesJobs` (PostgreSQL,
LISTEN/NOTIFY) the store's listener wakes it; on any other store it re-reads
with growing pauses (`fsm.waiting.WAIT_POLL_FIRST` .. `WAIT_POLL_MAX`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .engine import Engine
from .errors import BadInput, WaitTimeout
from .ports import WatchesJobs
from .records import AuditEntry, Job
from .waiting import WAIT_POLL_FIRST, WAIT_POLL_MAX, WAIT_RECHECK, wait_timeout

T = TypeVar("T")

#: default bound on engine calls running at once for one AsyncEngine
DEFAULT_MAX_THREADS = 8


class AsyncEngine:
    """`await`-able submit, reads, operator actions and `wait` over one Engine.

    async with AsyncEngine(Engine(open_store(url))) as engine:
        job = await engine.submit("email.send", {"to": "a@b.c"}, idempotency_key="...")
        done = await engine.wait(job.id, timeout=10)
    """

    def __init__(self, engine: Engine, *, max_threads: int = DEFAULT_MAX_THREADS) -> None:
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise BadInput(f"max_threads must be a positive integer, got {max_threads!r}")
        self.engine = engine
        self.max_threads = max_threads
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="jobfsm-aio")

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    # --- submit and reads ----------------------------------------------------------

    async def submit(self, kind: str, payload: Any = None, **opts: Any) -> Job:
        """`Engine.submit`: one job; an idempotency key already used returns that job."""
        return await self._call(self.engine.submit, kind, payload, **opts)

    async def submit_many(self, items: Iterable[tuple[str, Any, Mapping[str, Any]]]) -> list[Job]:
        """`Engine.submit_many`: many jobs in one store transaction."""
        return await self._call(self.engine.submit_many, list(items))

    async def get(self, job_id: str) -> Job:
        return await self._call(self.engine.get, job_id)

    async def history(self, job_id: str) -> list[AuditEntry]:
        return await self._call(self.engine.history, job_id)

    async def counts(self) -> dict[tuple[str, str], int]:
        return await self._call(self.engine.counts)

    # --- operator actions ------------------------------------------------------------

    async def cancel(self, job_id: str, *, actor: str, reason: str) -> Job:
        return await self._call(self.engine.cancel, job_id, actor=actor, reason=reason)

    async def requeue(self, job_id: str, *, actor: str, reason: str, attempts: int) -> Job:
        return await self._call(
            self.engine.requeue, job_id, actor=actor, reason=reason, attempts=attempts
        )

    async def resolve(
        self, job_id: str, *, outcome: str, actor: str, reason: str, result: Any = None
    ) -> Job:
        return await self._call(
            self.engine.resolve, job_id, outcome=outcome, actor=actor, reason=reason, result=result
        )

    async def erase(self, job_id: str, *, actor: str, reason: str) -> Job:
        """`Engine.erase`: blank a finished job's payload and result, audited."""
        return await self._call(self.engine.erase, job_id, actor=actor, reason=reason)

    # --- waiting ---------------------------------------------------------------------

    async def wait(self, job_id: str, *, timeout: float) -> Job:
        """The job once in a final state (`Engine.final_states`); WaitTimeout after `timeout`.

        Cancelling the awaiting task stops the wait (the job is not touched).
        """
        limit = wait_timeout(timeout)
        deadline = time.monotonic() + limit
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        store = self.engine.store
        unwatch: Callable[[], None] | None = None
        if isinstance(store, WatchesJobs):

            def wake() -> None:
                loop.call_soon_threadsafe(changed.set)

            unwatch = await self._call(store.watch, job_id, wake)
        pause = WAIT_POLL_FIRST
        try:
            while True:
                job = await self.get(job_id)
                left = deadline - time.monotonic()
                if job.state in self.engine.final_states:
                    return job
                if left <= 0:
                    raise WaitTimeout(job_id, job.state, limit)
                if unwatch is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), min(left, WAIT_RECHECK))
                    changed.clear()
                else:
                    await asyncio.sleep(min(left, pause))
                    pause = min(WAIT_POLL_MAX, pause * 2)
        finally:
            if unwatch is not None:
                unwatch()

    # --- closing -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop the thread pool (calls in flight finish); the store is the caller's to close."""
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._pool.shutdown, wait=True)
        )

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
