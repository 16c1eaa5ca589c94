"""The `worker` fault model: a real worker whose heartbeats start failing mid-run.

A `fsm.worker.Worker` runs a job on real threads over a memory store (opened by URL,
through the same entry point as every store) whose lease renewals fail from some
moment on, as when the store becomes unreachable for this worker only. The worker
cannot renew, so it must give its runs up before their leases lapse at the store, when
another worker may take them over. Hypothesis picks the lease TTL, the heartbeat
interval and when the renewals start to fail.

- W1 the worker gives a run up (its handler sees `ctx.lease_lost`) before the
  run's lease lapses at the store;
- W2 a run given up reports nothing: its result never reaches the store;
- W3 a run this process claimed is never judged dead by its own process: a
  recovery sweep of the worker itself (`Worker.sweep`, the worker's own identity)
  runs in the claim's own thread twice: while the claim is in flight (the store's
  claim committed, the runs not yet registered as held: `Identity.claiming` says a
  claim is in flight) and as the claim ends (`Identity.claiming` exits, the runs
  registered), before the claim returns to the worker's loop; each must leave the
  run leased to the worker under its fence (a run judged by neither the registry
  nor the claim in flight would be expired as "owner_dead_not_held" and run twice).

The model runs on wall-clock time (the worker's heartbeat thread sleeps for real),
so its examples are few and short. It always runs over `memory://`, whatever store the
run is given: what it checks is the worker's own bookkeeping, not a store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from ..errors import TransientStoreError
from ..inputs import KindPolicy
from ..policies import LeasePolicy, Limits, Policy, RecoveryPolicy
from ..ports import ClaimRequest, RenewRequest, Store
from ..records import Job
from ..registry import open_store
from ..service.engine import Engine
from ..service.identity import Identity
from ..worker import Worker
from .faults_models import ModelRun

#: bound on any wait of the model (the handler start, the give-up, the worker's stop)
WAIT = 10.0


class _RenewalsFail:
    """A store whose lease renewals fail once `failing` is set; the rest goes through."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failing = threading.Event()

        self.claimed: list[Job] = []
        #: run with the jobs a claim leased, just after the store committed it (the
        #: claim still in flight: its runs not yet registered as held)
        self.on_committed: Callable[[list[Job]], None] | None = None

    def renew(self, request: RenewRequest) -> dict[str, str]:
        if self.failing.is_set():
            raise TransientStoreError("lease renewals fail (worker fault model)")
        return self._store.renew(request)

    def claim(self, request: ClaimRequest) -> list[Job]:
        got = self._store.claim(request)
        self.claimed.extend(got)
        if got and self.on_committed is not None:
            self.on_committed(got)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _SweepAsClaimsEnd(Identity):
    """The worker's identity, whose `claiming()` runs `on_claimed(jobs)` as it exits
    after a claim that leased `jobs`: the first moment the process no longer says a
    claim is in flight, still in the worker's claim thread, before the claim returns.
    The production claim path is unchanged; this is only a hook point on it."""

    def __init__(self, claimed: list[Job]) -> None:
        super().__init__()
        self._claimed = claimed
        self.on_claimed: Callable[[list[Job]], None] | None = None

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        before = len(self._claimed)
        with super().claiming():
            yield
        got = self._claimed[before:]
        if got and self.on_claimed is not None:
            self.on_claimed(got)


class WorkerModel:
    name: ClassVar[str] = "worker"
    about: ClassVar[str] = "a worker whose lease renewals fail while it runs a job"
    examples: ClassVar[dict[str, int]] = {"quick": 2, "default": 5, "thorough": 25}

    def run(self, ctx: ModelRun) -> None:
        # Thread timing decides the outcome: keep the first failure rather than let
        # hypothesis replay it into a Flaky report.
        found: list[AssertionError] = []

        @ctx.settings(self.examples[ctx.size])
        @given(
            ttl=st.sampled_from((0.6, 0.8, 1.0, 1.2)),
            beats=st.integers(3, 6),
            fail_after=st.floats(0.0, 0.5),
        )
        def example(ttl: float, beats: int, fail_after: float) -> None:
            if found:
                return
            try:
                self._one(ctx, ttl, ttl / beats, fail_after)
            except AssertionError as err:
                found.append(err)

        example()
        if found:
            raise found[0]

    def _one(self, ctx: ModelRun, ttl: float, interval: float, fail_after: float) -> None:
        store = _RenewalsFail(open_store("memory://"))
        policy = Policy(
            lease=LeasePolicy(ttl=ttl, heartbeat_interval=interval),
            recovery=RecoveryPolicy(sweep_interval=3600.0),  # nobody else takes the job
            limits=Limits(shutdown_grace=0.1),
        )
        engine = Engine(store, policy=policy, kinds={"w": KindPolicy()})
        started = threading.Event()
        lost_at: list[float] = []
        finish = threading.Event()

        def handler(run: Any) -> str:
            started.set()
            if run.lease_lost.wait(WAIT):
                lost_at.append(time.time())
            finish.wait(WAIT)
            return "done"

        identity = _SweepAsClaimsEnd(store.claimed)
        worker = Worker(
            engine,
            {"w": handler},
            identity=identity,
            poll_interval=0.05,
            install_signals=False,
        )
        judged: list[str] = []

        def own_sweep(when: str) -> Callable[[list[Job]], None]:
            def sweep(jobs: list[Job]) -> None:
                worker.sweep()
                ctx.stats.faults[f"worker: own sweep {when}"] += 1
                for got in jobs:
                    now = engine.get(got.id)
                    if now.fence != got.fence or now.state not in ("leased", "running"):
                        trail = [(e.event, e.reason) for e in engine.history(got.id)][-2:]
                        judged.append(
                            f"W3 job {got.id}: claimed under fence {got.fence}, then its own "
                            f"process's sweep {when} left it {now.state} (fence {now.fence}; "
                            f"{trail})"
                        )

            return sweep

        store.on_committed = own_sweep("while its claim is in flight")
        identity.on_claimed = own_sweep("as its claim ends")
        job = engine.submit("w", {})
        thread = threading.Thread(target=worker.run, name="worker-model", daemon=True)
        thread.start()
        try:
            if not started.wait(WAIT):
                raise AssertionError(judged[0] if judged else "W0 the worker never started the job")
            if judged:
                raise AssertionError(judged[0])
            ctx.stats.checks["W3 a claimed run is never judged dead by its own process"] += 1
            time.sleep(fail_after)
            store.failing.set()
            ctx.stats.faults["worker: lease renewals fail"] += 1
            deadline = time.monotonic() + WAIT
            while not lost_at and time.monotonic() < deadline:
                time.sleep(0.01)
            lease_until = engine.get(job.id).lease_until
            if not lost_at:
                raise AssertionError(f"W1 job {job.id}: never given up after renewals failed")
            if lease_until is not None and lost_at[0] >= lease_until:
                raise AssertionError(
                    f"W1 job {job.id}: given up {lost_at[0] - lease_until:.2f}s after its "
                    f"lease lapsed (ttl {ttl:g}s, heartbeat {interval:.2f}s)"
                )
            ctx.stats.checks["W1 runs given up before their leases lapse"] += 1
            finish.set()
            time.sleep(interval * 2)  # the given-up run returns; nothing may report it
            after = engine.get(job.id)
            if after.state != "running" or any(
                e.event == "succeed" for e in engine.history(job.id)
            ):
                raise AssertionError(f"W2 job {job.id}: a given-up run reported ({after.state})")
            ctx.stats.checks["W2 given-up runs report nothing"] += 1
        finally:
            finish.set()
            worker.stop(now=True)
            thread.join(WAIT)
