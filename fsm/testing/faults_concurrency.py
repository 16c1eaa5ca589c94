"""The `concurrency` fault model: real threads race on the same jobs of a real store.

Each example opens a fresh database, submits a few jobs, and starts THREADS
threads at once (a barrier), each with its own store handle (its own connection
pool or SQLite connection: as separate worker processes would hold) and its own
owner. Each thread runs a script hypothesis drew: claim, start, succeed, fail,
heartbeat, cancel, and sweeps on a shared fake clock that other threads move
past the leases, and batch submits to a second queue with a drawn capacity
(`Limits.queue_capacity`). On a store with an asyncio twin (PostgreSQL), in the
examples that draw it (half), the second thread submits through
`AsyncEngine(path="async")` over its handle's twin, the others through the
blocking Engine, so sync and async submits race for the same room; the second
thread's last submit is a batch that cannot fit. The interleaving is the
operating system's; hypothesis chooses the scripts.

After each round, with every thread joined:

- K1 no (job, fence) was leased to two claimers, and every claim returned a
  job leased to the claimer: at most one live owner per fence;
- K2 every report the store accepted came from the holder of that fence;
- K3 contention alone failed no call: nothing but LeaseLost, IllegalTransition
  or a lost compare-and-set came back (no "database is locked", no store error)
  when no fault was injected;
- K4 the capacity queue never holds more waiting jobs than its capacity, a batch
  refused with QueueFull stored none of its jobs, an accepted batch stored all
  of them, and a batch was refused only when it did not fit (the queue only
  fills: nobody claims from it, so its final count bounds what each submit saw);
- every job is still there, in exactly one state, and its trail replays to its
  record (`trail_problems`).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any, ClassVar

import attrs
from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import IllegalTransition, JobFSMError, LeaseLost, QueueFull, VersionConflict
from ..inputs import KindPolicy
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import HasAsyncStore, ScanRequest, Store
from ..records import Job, Owner
from ..service import maintenance as recovery
from ..service.engine import Engine
from .faults_async import AsyncClient
from .faults_machine import suite_policy
from .faults_models import ModelRun

THREADS = 4
#: the thread that submits through AsyncEngine on a store with an asyncio twin
ASYNC_THREAD = 1
MAX_JOBS = 6
#: bound on how long a round may take before it is reported as hung
JOIN_TIMEOUT = 60.0
OPS = ("claim", "claim", "start", "succeed", "fail", "heartbeat", "cancel", "sweep", "submit")
EXPECTED = (LeaseLost, IllegalTransition, VersionConflict)
#: A stale report is rejected on the record the engine read, and its `rejected`
#: entry is appended afterwards without a compare-and-set: when another thread
#: moves the job in between, the entry lands after a newer transition and names the
#: state the report saw. The record is unchanged (the promise that matters); the
#: trail's order of that one entry is not. The sequential machine still fails on
#: it; here it is counted and shown, not failed.
LATE_REJECTION = "a rejected report must name the state it left unchanged"
LATE_REJECTION_SEEN = "concurrency: a rejected report audited after a newer transition"

_script = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 7)), min_size=4, max_size=12)
_example = st.tuples(
    st.integers(2, MAX_JOBS),
    st.lists(_script, min_size=THREADS, max_size=THREADS),
    st.integers(1, 4),  # the capacity of the submit queue
    st.booleans(),  # with an asyncio twin: ASYNC_THREAD submits through AsyncEngine
)


class ConcurrencyModel:
    name: ClassVar[str] = "concurrency"
    about: ClassVar[str] = "threads with their own store handles race on the same jobs"
    examples: ClassVar[dict[str, int]] = {"quick": 8, "default": 100, "thorough": 1000}

    def run(self, ctx: ModelRun) -> None:
        # A race seldom fails twice the same way: the first failure is kept and raised
        # after hypothesis finishes, rather than replayed (a replay that passes would
        # bury it under a Flaky report).
        found: list[AssertionError] = []

        @ctx.settings(self.examples[ctx.size])
        @given(_example)
        def example(plan: tuple[int, list[list[tuple[str, int]]], int, bool]) -> None:
            if found:
                return
            with ctx.database() as opener:
                try:
                    n_jobs, scripts, capacity, aio = plan
                    handles = [opener() for _ in range(THREADS)]
                    _Round(ctx, handles, capacity, aio).play(n_jobs, scripts)
                except AssertionError as err:
                    found.append(err)

        example()
        if found:
            raise found[0]


class _Round:
    def __init__(self, ctx: ModelRun, handles: list[Store], capacity: int, aio: bool) -> None:
        self.ctx = ctx
        self.spec = lifecycle()
        self.clock = FakeClock()
        self.queue = f"race-{uuid.uuid4().hex[:12]}"
        self.full_queue = f"full-{uuid.uuid4().hex[:12]}"
        self.capacity = capacity
        #: ASYNC_THREAD submits through AsyncEngine (when its handle has an asyncio twin)
        self.async_thread = ASYNC_THREAD if aio and isinstance(handles[0], HasAsyncStore) else -1
        base = suite_policy()
        self.policy = attrs.evolve(
            base,
            limits=attrs.evolve(base.limits, queue_capacity={self.full_queue: capacity}),
        )
        kinds = {
            "work": KindPolicy(queue=self.queue, retry_safe=True, max_attempts=3),
            "fill": KindPolicy(queue=self.full_queue),
        }
        self.engines = [
            Engine(h, clock=self.clock, policy=self.policy, kinds=kinds) for h in handles
        ]
        self.owners = [
            Owner(host="thread-sim", pid=100 + i, incarnation=f"thread-{i}-{uuid.uuid4().hex[:6]}")
            for i in range(THREADS)
        ]
        self.lock = threading.Lock()
        self.claims: dict[tuple[str, int], list[int]] = {}
        self.accepted: list[tuple[int, str, str, int]] = []
        self.errors: list[str] = []
        self.faults: Counter[str] = Counter()
        #: (thread, batch number) -> its size, and whether it was refused (QueueFull)
        self.batches: dict[tuple[int, int], tuple[int, bool]] = {}
        self.aio: list[AsyncClient | None] = [None] * THREADS

    def play(self, n_jobs: int, scripts: list[list[tuple[str, int]]]) -> None:
        e = self.engines[0]
        ids = [e.submit("work", {"n": i}).id for i in range(n_jobs)]
        barrier = threading.Barrier(THREADS)
        threads = [
            threading.Thread(target=self._thread, args=(i, scripts[i], ids, barrier), daemon=True)
            for i in range(THREADS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_TIMEOUT)
        if any(t.is_alive() for t in threads):
            raise AssertionError(f"K3 {THREADS} racing threads still ran after {JOIN_TIMEOUT}s")
        self.ctx.stats.faults.update(self.faults)
        self._check(ids)

    def _thread(
        self, i: int, script: list[tuple[str, int]], ids: list[str], barrier: threading.Barrier
    ) -> None:
        engine, owner = self.engines[i], self.owners[i]
        held: dict[str, int] = {}
        try:
            barrier.wait(JOIN_TIMEOUT)
        except threading.BrokenBarrierError:
            return
        try:
            self._script(i, engine, owner, held, script, ids)
        finally:
            client = self.aio[i]
            if client is not None:
                try:
                    client.close()
                except Exception as err:
                    with self.lock:
                        self.errors.append(f"thread {i} closing its AsyncEngine: {err}")

    def _script(  # noqa: PLR0917  (internal: one thread's state, passed down)
        self,
        i: int,
        engine: Engine,
        owner: Owner,
        held: dict[str, int],
        script: list[tuple[str, int]],
        ids: list[str],
    ) -> None:
        # the async thread's script ends with a batch one larger than the capacity: it
        # never fits, whatever the race left in the queue, so its path must refuse it
        # (the sync threads' refusals are tested by the race alone)
        last = [("overfill", self.capacity + 1)] if i == ASYNC_THREAD else []
        for n, (op, pick) in enumerate([*script, *last]):
            try:
                if op == "submit":
                    self._submit(i, engine, (i, n), 1 + pick % 3)
                elif op == "overfill":
                    self._submit(i, engine, (i, n), pick)
                else:
                    self._op(i, engine, owner, held, op, pick, ids)
            except EXPECTED:
                with self.lock:
                    self.faults["concurrency: lost a race (stale fence, moved job, lost CAS)"] += 1
            except JobFSMError as err:
                with self.lock:
                    self.errors.append(f"thread {i} {op}: {type(err).__name__}: {err}")
            except Exception as err:  # a driver error that escaped the store's translation
                with self.lock:
                    self.errors.append(f"thread {i} {op}: untranslated {type(err).__name__}: {err}")

    def _submit(self, i: int, engine: Engine, batch: tuple[int, int], size: int) -> None:
        """One batch of `size` jobs to the capacity queue: through AsyncEngine over the
        handle's asyncio twin on the async thread of an example that drew it, else the
        Engine."""
        items: list[tuple[str, Any, dict[str, Any]]] = [
            ("fill", {"t": batch[0], "b": batch[1], "n": k}, {}) for k in range(size)
        ]
        client = self.aio[i]
        if client is None and i == self.async_thread:
            client = self.aio[i] = AsyncClient(engine)
        how = "async" if client is not None else "sync"
        try:
            if client is not None:
                client.submit_many(items)
            else:
                engine.submit_many(items)
        except QueueFull:
            refused = True
        else:
            refused = False
        with self.lock:
            self.batches[batch] = (size, refused)
            self.faults[f"concurrency: racing {how} submit to a queue of capacity"] += 1

    def _op(  # noqa: PLR0917  (internal: one thread's state, passed down)
        self,
        i: int,
        engine: Engine,
        owner: Owner,
        held: dict[str, int],
        op: str,
        pick: int,
        ids: list[str],
    ) -> None:
        if op == "claim":
            got = engine.claim(owner, (self.queue,), limit=1 + pick % 3)
            with self.lock:
                self.faults["concurrency: racing claim"] += 1
                for job in got:
                    self.claims.setdefault((job.id, job.fence), []).append(i)
                    if job.owner != owner or job.state != "leased":
                        self.errors.append(f"K1 claim by thread {i} returned {job}")
            for job in got:
                held[job.id] = job.fence
            return
        if op == "sweep":
            self.clock.advance(self.policy.lease.ttl / 2 + pick)
            recovery.sweep(engine)
            with self.lock:
                self.faults["concurrency: racing sweep past leases"] += 1
            return
        if op == "cancel":
            engine.cancel(ids[pick % len(ids)], actor="operator", reason="racing cancel")
            with self.lock:
                self.faults["concurrency: racing operator cancel"] += 1
            return
        if op == "heartbeat":
            renewed = engine.heartbeat(owner, held)
            for jid in list(held):
                if jid not in renewed:
                    del held[jid]
            with self.lock:
                self.faults["concurrency: racing heartbeat"] += 1
            return
        if not held:
            return
        jid = sorted(held)[pick % len(held)]
        fence = held[jid]
        written: Job
        if op == "start":
            written = engine.start(jid, fence)
        elif op == "succeed":
            written = engine.succeed(jid, fence, {"by": i})
            del held[jid]
        else:
            written = engine.fail(jid, fence, "handler raised")
            del held[jid]
        with self.lock:
            self.accepted.append((i, jid, op, fence))
            if written.fence != fence:
                self.errors.append(
                    f"K2 {op} of job {jid} under fence {fence} wrote {written.fence}"
                )

    def _check(self, ids: list[str]) -> None:
        stats = self.ctx.stats.checks
        for (jid, fence), who in self.claims.items():
            if len(who) > 1:
                raise AssertionError(
                    f"K1 job {jid}: fence {fence} was leased to threads {who} at once"
                )
        stats["K1 one claimer per (job, fence)"] += 1
        for i, jid, op, fence in self.accepted:
            holder = self.claims.get((jid, fence))
            if holder != [i]:
                raise AssertionError(
                    f"K2 job {jid}: thread {i}'s {op} with fence {fence} was accepted, "
                    f"but that fence was leased to {holder}"
                )
        stats["K2 accepted reports come from the fence's holder"] += 1
        if self.errors:
            raise AssertionError(
                "K3 contention alone failed calls (no fault was injected): "
                + "; ".join(self.errors[:5])
            )
        stats["K3 contention alone fails no call"] += 1
        store = self.engines[0].store
        # one scan for both queues: the race queue's jobs and the capacity queue's
        listed = store.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue, self.full_queue))
        )
        self._check_capacity([j for j in listed if j.queue == self.full_queue])
        seen: Counter[str] = Counter(j.id for j in listed if j.queue == self.queue)
        for jid in ids:
            if seen[jid] != 1:
                raise AssertionError(f"I3 job {jid} is listed {seen[jid]} times after a race")
            job = store.get(jid)
            assert job is not None
            history = store.history(jid)
            problems = []
            for problem in trail_problems(job, history, self.spec, self.policy):
                if LATE_REJECTION in problem:
                    self.ctx.stats.faults[LATE_REJECTION_SEEN] += 1
                else:
                    problems.append(problem)
            if problems:
                raise AssertionError("; ".join(problems))
            self.ctx.coverage.trail(history)
        stats["I2/I4/I5/I6/I8 audit trail and replay"] += 1

    def _check_capacity(self, stored: list[Job]) -> None:
        waiting = [j for j in stored if j.state in self.spec.sources("lease")]
        if len(waiting) > self.capacity:
            raise AssertionError(
                f"K4 queue {self.full_queue} holds {len(waiting)} waiting jobs, over its "
                f"capacity of {self.capacity} (racing sync and async submits)"
            )
        kept: Counter[tuple[int, int]] = Counter()
        for job in stored:
            p = job.payload
            kept[(p["t"], p["b"])] += 1
        for batch, (size, refused) in sorted(self.batches.items()):
            if refused and kept[batch]:
                raise AssertionError(
                    f"K4 thread {batch[0]}'s batch {batch[1]} was refused (QueueFull) but "
                    f"{kept[batch]} of its {size} jobs were stored"
                )
            if not refused and kept[batch] != size:
                raise AssertionError(
                    f"K4 thread {batch[0]}'s batch {batch[1]} was accepted but "
                    f"{kept[batch]} of its {size} jobs were stored"
                )
            if refused and len(waiting) + size <= self.capacity:
                raise AssertionError(
                    f"K4 thread {batch[0]}'s batch of {size} was refused (QueueFull) though "
                    f"the queue ends with {len(waiting)} of {self.capacity} (it fit)"
                )
        self.ctx.stats.checks["K4 a queue never over capacity; a refused batch stores nothing"] += 1
