"""AsyncEngine: the Engine for asyncio code, without blocking the event loop.

Every write goes through the service's plans (`fsm.service.plans`: read, `decide`,
fenced compare-and-set with its audit entry, bounded re-reads; submit's
validation and insert), driven by one of two drivers:

- **async store** (`path="async"`, and `"auto"` when the store `HasAsyncStore`,
  as PostgreSQL does): the store's asyncio twin (psycopg's `AsyncConnectionPool`)
  answers each request; no thread is involved in a store call.
- **threads** (`path="threads"`, and `"auto"` for SQLite and memory): the
  blocking Engine method runs on a bounded pool of threads (`max_threads`).

Either way the kernel (policy, kinds, spec, clock, observers, publisher) is the one of
`engine` at the time of each call: the AsyncEngine holds no configuration of its own. A publisher
(blocking) runs on the thread pool.

`wait` holds no thread while it waits: on a store that `WatchesJobs` (PostgreSQL,
LISTEN/NOTIFY) the store's listener wakes it; on any other store it re-reads
with growing pauses (`fsm.service.waiting.WAIT_POLL_FIRST` .. `WAIT_POLL_MAX`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import BadInput, JobNotFound
from ..ports import AsyncStore, Erasable, HasAsyncStore, ScanRequest, WatchesJobs
from ..records import AuditEntry, Job
from ..registry import open_store
from . import plans
from .connections import adriver_connection
from .drivers import AsyncPerformer
from .engine import Engine
from .plans import adrive
from .waiting import Pause, wait_plan, wait_timeout

T = TypeVar("T")

#: default bound on blocking calls running at once for one AsyncEngine
DEFAULT_MAX_THREADS = 8
#: `path`: how store calls are made (see the module docstring)
PATHS = ("auto", "async", "threads")


class AsyncEngine:
    """`await`-able submit, reads, operator actions and `wait` over one Engine.

    async with await AsyncEngine.open("postgresql://app@db/app", kinds=...) as engine:
        job = await engine.submit("email.send", {"to": "a@b.c"}, idempotency_key="...")
        done = await engine.wait(job.id, timeout=10)
    """

    def __init__(
        self, engine: Engine, *, max_threads: int = DEFAULT_MAX_THREADS, path: str = "auto"
    ) -> None:
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise BadInput(f"max_threads must be a positive integer, got {max_threads!r}")
        if path not in PATHS:
            raise BadInput(f"path must be one of {', '.join(PATHS)}; got {path!r}")
        twin = isinstance(engine.store, HasAsyncStore)
        if path == "async" and not twin:
            raise BadInput(
                f"{type(engine.store).__name__} has no asyncio twin (no `async_store`); "
                "use path='threads' or 'auto'"
            )
        self.engine = engine
        self.max_threads = max_threads
        #: True: store calls go to the store's asyncio twin; False: to threads
        self.uses_async_store = twin and path != "threads"
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="jobfsm-aio")
        self._astore: AsyncStore | None = None
        self._opened: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: `open` opened the blocking store too: `aclose` closes it
        self.owns_store = False

    @classmethod
    async def open(
        cls,
        url: str | None = None,
        *,
        max_threads: int = DEFAULT_MAX_THREADS,
        path: str = "auto",
        **engine_options: Any,
    ) -> AsyncEngine:
        """Open the store `url` names (`fsm.open_store`, off the loop), an Engine over it
        with `engine_options` (policy, kinds, clock, metrics, publisher, ...), and the
        store's asyncio twin where it has one. `aclose` closes all of it."""
        store = await asyncio.to_thread(open_store, url)
        try:
            aengine = cls(Engine(store, **engine_options), max_threads=max_threads, path=path)
            aengine.owns_store = True
            if aengine.uses_async_store:
                await aengine.twin()
        except BaseException:
            await asyncio.to_thread(store.close)
            raise
        return aengine

    @property
    def async_store(self) -> AsyncStore | None:
        """The store's asyncio twin in use (None on the thread path, or before first use)."""
        return self._astore

    @property
    def threads(self) -> ThreadPoolExecutor:
        """The bounded pool blocking calls run on."""
        return self._pool

    async def twin(self) -> AsyncStore:
        """The asyncio twin, opened on the first call's loop (every call must use it)."""
        loop = asyncio.get_running_loop()
        if self._opened is None:
            assert isinstance(self.engine.store, HasAsyncStore)
            self._astore = self.engine.store.async_store()
            self._loop = loop
            self._opened = asyncio.ensure_future(self._astore.open())
        elif loop is not self._loop:
            raise BadInput(
                "this AsyncEngine's connection pool belongs to another event loop; "
                "make one AsyncEngine per loop"
            )
        await asyncio.shield(self._opened)
        assert self._astore is not None
        return self._astore

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def _run(self, plan: plans.Plan[T], fallback: Callable[[], T]) -> T:
        """Drive `plan` over the asyncio twin, or run `fallback` (the Engine's blocking
        method running the same plan) on a thread."""
        if not self.uses_async_store:
            plan.close()
            return await self._call(fallback)
        perform = AsyncPerformer(self.engine.kernel, await self.twin(), self._call)
        return await adrive(plan, perform)

    # --- submit and reads ----------------------------------------------------------

    async def submit(self, kind: str, payload: Any = None, *, conn: Any = None, **opts: Any) -> Job:
        """`Engine.submit`: one job; an idempotency key already used returns that job.
        `conn`: see `submit_many`."""
        (job,) = await self.submit_many([(kind, payload, opts)], conn=conn)
        return job

    async def submit_many(
        self, items: Iterable[tuple[str, Any, Mapping[str, Any]]], *, conn: Any = None
    ) -> list[Job]:
        """`Engine.submit_many`: many jobs in one store transaction. With `conn`, in the
        caller's open transaction (docs/transactional-submit.md): a
        `psycopg.AsyncConnection` (or a SQLAlchemy AsyncSession or AsyncConnection over
        one) on the PostgreSQL asyncio path, awaited; a blocking psycopg or sqlite3
        connection (or a SQLAlchemy Session or Connection) on a thread of the pool."""
        listed = list(items)
        if conn is not None:  # a SQLAlchemy AsyncSession or AsyncConnection: its driver's
            conn = await adriver_connection(conn)
        if conn is not None and not (self.uses_async_store and _is_async_connection(conn)):
            if _is_async_connection(conn):
                raise BadInput(
                    "conn=: an AsyncConnection needs the PostgreSQL asyncio path "
                    f"(AsyncEngine path='async'); this one runs {type(self.engine.store).__name__} "
                    "on threads: pass a blocking connection"
                )
            return await self._call(functools.partial(self.engine.submit_many, listed, conn=conn))
        plan = plans.submit_many(self.engine.kernel, listed, conn=conn)
        return await self._run(plan, functools.partial(self.engine.submit_many, listed))

    async def get(self, job_id: str) -> Job:
        if not self.uses_async_store:
            return await self._call(self.engine.get, job_id)
        job = await (await self.twin()).get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def history(self, job_id: str) -> list[AuditEntry]:
        if not self.uses_async_store:
            return await self._call(self.engine.history, job_id)
        await self.get(job_id)
        return await (await self.twin()).history(job_id)

    async def counts(self) -> dict[tuple[str, str], int]:
        if not self.uses_async_store:
            return await self._call(self.engine.counts)
        return await (await self.twin()).counts()

    async def scan(self, request: ScanRequest) -> list[Job]:
        if not self.uses_async_store:
            return await self._call(self.engine.scan, request)
        return await (await self.twin()).scan(request)

    # --- operator actions ------------------------------------------------------------

    async def cancel(self, job_id: str, *, actor: str, reason: str) -> Job:
        plan = plans.cancel(self.engine.kernel, job_id, actor=actor, reason=reason)
        fallback = functools.partial(self.engine.cancel, job_id, actor=actor, reason=reason)
        return await self._run(plan, fallback)

    async def requeue(self, job_id: str, *, actor: str, reason: str, attempts: int) -> Job:
        kernel = self.engine.kernel
        plan = plans.requeue(kernel, job_id, actor=actor, reason=reason, attempts=attempts)
        fallback = functools.partial(
            self.engine.requeue, job_id, actor=actor, reason=reason, attempts=attempts
        )
        return await self._run(plan, fallback)

    async def resolve(
        self, job_id: str, *, outcome: str, actor: str, reason: str, result: Any = None
    ) -> Job:
        options: dict[str, Any] = {
            "outcome": outcome,
            "actor": actor,
            "reason": reason,
            "result": result,
        }
        plan = plans.resolve(self.engine.kernel, job_id, **options)
        return await self._run(plan, functools.partial(self.engine.resolve, job_id, **options))

    async def erase(self, job_id: str, *, actor: str, reason: str) -> Job:
        """`Engine.erase`: blank a finished job's payload and result, audited."""
        if not isinstance(self.engine.store, Erasable):
            return await self._call(self.engine.erase, job_id, actor=actor, reason=reason)
        plan = plans.erase(self.engine.kernel, job_id, actor=actor, reason=reason)
        fallback = functools.partial(self.engine.erase, job_id, actor=actor, reason=reason)
        return await self._run(plan, fallback)

    # --- waiting ---------------------------------------------------------------------

    async def wait(self, job_id: str, *, timeout: float) -> Job:
        """The job once in a final state (`Engine.final_states`); WaitTimeout after
        `timeout` (the loop is `fsm.service.waiting.wait_plan`, as `Engine.wait`'s).

        Cancelling the awaiting task stops the wait (the job is not touched).
        """
        limit = wait_timeout(timeout)
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        store = self.engine.store
        unwatch: Callable[[], None] | None = None
        if isinstance(store, WatchesJobs):

            def wake() -> None:
                loop.call_soon_threadsafe(changed.set)

            unwatch = await self._call(store.watch, job_id, wake)

        async def perform(request: plans.Read | Pause) -> Job | None:
            if isinstance(request, plans.Read):
                try:
                    return await self.get(request.job_id)
                except JobNotFound:
                    return None
            if unwatch is None:
                await asyncio.sleep(request.seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), request.seconds)
                changed.clear()
            return None

        plan = wait_plan(self.engine.kernel, job_id, limit, watched=unwatch is not None)
        try:
            return await adrive(plan, perform)
        finally:
            if unwatch is not None:
                unwatch()

    # --- closing -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the asyncio twin's pool (its connections) and stop the thread pool
        (calls in flight finish). The blocking store is closed too if `open` opened
        it; otherwise it is its opener's to close."""
        if self._opened is not None and self._astore is not None:
            with contextlib.suppress(Exception):
                await self._opened  # an open that failed has nothing to close
            await self._astore.aclose()
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._pool.shutdown, wait=True)
        )
        if self.owns_store:
            await asyncio.to_thread(self.engine.store.close)

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _is_async_connection(conn: object) -> bool:
    """A psycopg AsyncConnection (psycopg is the postgres extra: absent, it is none)."""
    cls = type(conn)
    return any(
        c.__module__.startswith("psycopg") and c.__name__ == "AsyncConnection" for c in cls.__mro__
    )
