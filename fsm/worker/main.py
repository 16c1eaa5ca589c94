"""The Worker: a thin orchestrator over one thread per role.

- claims (`claims.Claims`, on the thread that calls `run()`): wake-ups in, a
  batch claimed and started, attempts handed to the executor;
- reports (`reports.Reporter`): finished attempts written back, batched;
- leases (`leases.Leases`): one heartbeat renews every held lease, and notices
  cancel requests and lost leases;
- sweeps (`sweeper.Sweeper`): the one recovery sweep (`fsm.service.maintenance`), on a timer;
- schedules (`ticker.Scheduler`): submits the due ticks of schedules (unless disabled);
- retention (`retainer.Retainer`): prunes finished jobs past their retention, one worker
  at a time (only with `retention=`).

Shutdown order (`_shutdown`): stop claiming; wait for runs to finish within the
shutdown grace; hard-cancel what is left and leave it to recovery, recorded; let
the reporter write what already finished (bounded); stop heartbeats and sweeps;
expire the hard-cancelled jobs with the reason; close the executor, the delivery
and the liveness token. The worker never writes a state itself: every change goes
through the Engine, so through `decide` with compare-and-set.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

from ..errors import BadInput, JobFSMError
from ..handling.attempt import Handler, handler_path
from ..ports import ConfirmsDeath, Executor, HoldsSchedules, WorkerDelivery
from ..records import Job, Owner
from ..registry import load_delivery, load_executor
from ..service.engine import Engine
from ..service.identity import Identity, current
from ..service.limits import declare, worker_limits
from ..service.maintenance import RecoveryReport
from ..service.maintenance.retention import Retention, RetentionPlan
from .claims import Claims
from .handlers import Handlers, HandlerSpec, registering
from .hooks import Hook, HookFailed, Hooks, InitsChildren, call_hook
from .leases import DEFAULT_CANCEL_GRACE, Leases
from .reports import DEFAULT_REPORT_BATCH, Reporter
from .retainer import Retainer
from .runs import Run
from .state import Shared
from .sweeper import Sweeper
from .ticker import DEFAULT_SCHEDULE_INTERVAL, Scheduler

log = logging.getLogger(__name__)

#: Defaults, each a keyword of Worker (docs/workers.md lists them all).
DEFAULT_CONCURRENCY = 4
DEFAULT_POLL_INTERVAL = 1.0  # longest wait for a wake-up before claiming anyway
#: the reporter's bound on writing what finished during shutdown
DRAIN_REPORTS = 5.0


class Worker:
    """Runs handlers for jobs of `queues`; `run()` blocks until `stop()` or a signal."""

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler | HandlerSpec] | None = None,
        *,
        executor: Executor | str | None = None,
        delivery: WorkerDelivery | str | None = None,
        queues: Sequence[str] = ("default",),
        concurrency: int = DEFAULT_CONCURRENCY,
        identity: Identity | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        shutdown_grace: float | None = None,
        report_batch: int = DEFAULT_REPORT_BATCH,
        install_signals: bool = True,
        tracer_provider: Any = None,
        scheduler: bool = True,
        schedule_interval: float = DEFAULT_SCHEDULE_INTERVAL,
        worker_init: Hook | None = None,
        worker_exit: Hook | None = None,
        child_init: Hook | None = None,
        limits: Mapping[str, int] | None = None,
        retention: RetentionPlan | Mapping[str, float | str | None] | None = None,
    ) -> None:
        """`worker_init`, `worker_exit`, `child_init`: set-up and clean-up hooks
        (`fsm.worker.hooks`), besides those declared on `handlers`, a `Handlers`.
        `tracer_provider`: where attempt spans go (default: the engine's, which is
        OpenTelemetry's global one unless the engine was given one); given here, it
        becomes the engine's (`Engine.tracer_provider`). `scheduler`: run the scheduler thread (the
        schedules of `handlers`, a `Handlers`, and those stored; docs/schedules.md),
        one pass every `schedule_interval` seconds. `limits`: this worker's own limits,
        limit key (`kind:NAME`, `queue:NAME`) -> most jobs of it held at once
        (docs/flow-control.md; the store's global limits hold as well).
        `retention`: prune finished jobs past their retention, one worker of the store at
        a time (a `RetentionPlan`, or a mapping state -> seconds or "7d";
        docs/retention.md); None: no automatic retention."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        for name, value in (("poll_interval", poll_interval), ("cancel_grace", cancel_grace)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.engine = engine
        if tracer_provider is not None:
            engine.tracer_provider = tracer_provider
        self.queues = tuple(queues)
        self.identity = identity or current()
        self.shutdown_grace = (
            engine.policy.limits.shutdown_grace if shutdown_grace is None else shutdown_grace
        )
        self.install_signals = install_signals
        self.handlers = Handlers()
        self._shared = Shared(
            engine,
            self.identity,
            self.handlers,
            concurrency=concurrency,
            poll_interval=poll_interval,
            queues=self.queues,
            limits=worker_limits(limits or {}),
        )
        if isinstance(engine.store, ConfirmsDeath):
            self._shared.liveness = engine.store.liveness
        self._leases = Leases(self._shared, cancel_grace)
        self._claims = Claims(self._shared, self._leases.regain_liveness)
        self._reporter = Reporter(self._shared, report_batch)
        self._sweeper = Sweeper(self._shared)
        for kind, fn in (handlers or {}).items():
            spec = fn if isinstance(fn, HandlerSpec) else Handlers({kind: fn})[kind]
            self._add(spec)
        self._scheduler: Scheduler | None = None
        declared = handlers.schedules.values() if isinstance(handlers, Handlers) else ()
        if isinstance(engine.store, HoldsSchedules):  # without passes: it tells its kinds
            self._scheduler = Scheduler(self._shared, declared, schedule_interval, passes=scheduler)
        elif scheduler and declared:
            log.warning("%s cannot keep schedules: none run", type(engine.store).__name__)
        self._retainer = (
            None if retention is None else Retainer(self._shared, RetentionPlan.of(retention))
        )
        declared_hooks = handlers.hooks if isinstance(handlers, Handlers) else Hooks()
        self.hooks = declared_hooks.merged(Hooks(worker_init, worker_exit, child_init))
        #: why the worker stopped on its own (a child's child_init failed): run() raises it
        self._fatal: HookFailed | None = None
        self._executor_ref = executor
        self._delivery_ref = delivery
        self._threads: list[threading.Thread] = []

    # --- handlers --------------------------------------------------------------------

    def _add(self, spec: HandlerSpec) -> None:
        self.handlers.add(spec)
        self.engine.register_kind(spec.kind, spec.policy)

    def register(self, kind: str, fn: Handler, **opts: Any) -> HandlerSpec:
        spec = Handlers().register(kind, fn, **opts)
        self._add(spec)
        return spec

    def handler(self, kind: str, **opts: Any) -> Callable[[Handler], Handler]:
        """`@worker.handler("kind", retry_safe=..., timeout=..., max_attempts=..., queue=...)`."""
        return registering(self.register, kind, opts)

    # --- state -------------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        return self._shared.concurrency

    @property
    def executor(self) -> Executor | None:
        return self._shared.executor

    @property
    def delivery(self) -> WorkerDelivery | None:
        return self._shared.delivery

    @property
    def owner(self) -> Owner:
        return self.identity.owner

    @property
    def ready(self) -> bool:
        """True while this worker can lease: running, store reachable, delivery ready."""
        s = self._shared
        return (
            s.started.is_set()
            and not s.stopping.is_set()
            and s.store_ok
            and not s.liveness_lost.is_set()
            and s.delivery is not None
            and bool(s.delivery.ready)
        )

    @property
    def running(self) -> dict[str, Job]:
        return self._shared.runs.jobs()

    @property
    def last_sweep(self) -> RecoveryReport | None:
        return self._sweeper.last

    @property
    def retention(self) -> Retention | None:
        """The automatic retention service (None without `retention=`)."""
        return None if self._retainer is None else self._retainer.service

    def wait_started(self, timeout: float) -> bool:
        return self._shared.started.wait(timeout)

    def stop(self, *, now: bool = False) -> None:
        """Stop leasing and drain (within the shutdown grace); `now=True` skips the drain."""
        s = self._shared
        s.stopping.set()
        if now:
            s.hard_stop.set()
        s.runs.freed.set()
        s.wake()

    def sweep(self) -> RecoveryReport:
        """One recovery sweep now (`fsm.service.maintenance.sweep` with this worker's identity)."""
        return self._sweeper.sweep()

    def heartbeat(self) -> None:
        """Renew every held lease now."""
        self._leases.heartbeat()

    # --- run ---------------------------------------------------------------------------

    def _open(self) -> None:
        s = self._shared
        ex = self._executor_ref
        if ex is None:  # an event loop as soon as one handler is `async def`
            ex = "asyncio" if any(h.asynchronous for h in self.handlers.values()) else "thread"
        if isinstance(ex, str):
            ex = load_executor(ex)()
        s.executor = ex
        child_init = self.hooks.child_init
        if child_init is not None and isinstance(ex, InitsChildren):
            ex.init_children(handler_path(child_init), self._child_init_failed)
        elif child_init is not None:  # handlers run in this process: it is their child
            call_hook("child_init", child_init)
        ex.start(s.concurrency)
        dl = self._delivery_ref
        if isinstance(dl, str) and dl != "poll":
            raise BadInput(
                f"delivery {dl!r}: only 'poll' can be named; pass other deliveries as objects "
                "(e.g. RabbitDelivery(url, engine=engine))"
            )
        if dl is None or isinstance(dl, str):
            factory = load_delivery("poll")
            dl = factory(self.engine.store, poll_interval=s.poll_interval)
        s.delivery = dl
        dl.start(self.queues)

    def _declare_limits(self) -> None:
        """Store the limits the handlers declare (`fsm.service.limits.declare`)."""
        for spec in self.handlers.values():
            if spec.limit is None:
                continue
            try:
                declare(self.engine.kernel, spec.limit, actor=str(self.identity.owner))
            except JobFSMError as err:  # the store's limit holds; another worker declares it
                log.warning("worker: limit %s not declared: %s", spec.limit.key, err)

    def _child_init_failed(self, why: str) -> None:
        """A child started to replace a dead one failed its child_init: stop, with the reason."""
        target = handler_path(self.hooks.child_init) if self.hooks.child_init else "(none)"
        self._fatal = HookFailed("child_init", target, why)
        log.error("worker %s: %s", self.identity.owner, self._fatal)
        self.stop()

    def run(self) -> None:
        """Work until stopped; on the main thread SIGTERM/SIGINT drain, a second one stops.

        Raises HookFailed when a set-up or clean-up hook failed (`fsm.worker.hooks`)."""
        s = self._shared
        previous = self._install_signals()
        initialized = False
        exit_failed: HookFailed | None = None
        try:
            if self.hooks.worker_init is not None:
                call_hook("worker_init", self.hooks.worker_init)
            initialized = True
            self._open()
            if s.liveness is not None:
                try:
                    s.liveness.hold(self.identity.owner, self._leases.on_liveness_lost)
                except Exception as err:  # the claim loop keeps trying, with backoff
                    log.warning("worker: liveness token not taken yet: %s", err)
                    s.liveness_lost.set()
            self._spawn("reporter", self._reporter.loop)
            self._spawn("heartbeat", self._leases.loop)
            self._declare_limits()
            self.sweep()  # start-up: reclaim at once the jobs of dead local processes
            s.store_ok = True  # the store answered: ready before any job arrives
            self._spawn("sweeper", self._sweeper.loop)
            if self._scheduler is not None:
                self._spawn("scheduler", self._scheduler.loop)
            if self._retainer is not None:
                self._spawn("retention", self._retainer.loop)
            s.started.set()
            log.info(
                "worker %s started: queues %s, concurrency %d",
                self.identity.owner,
                ",".join(self.queues),
                s.concurrency,
            )
            self._claims.loop()
        finally:
            try:
                self._shutdown()
            finally:
                if initialized:
                    exit_failed = self._exit_hook()
                self._restore_signals(previous)
                s.finished.set()
        if self._fatal is not None:
            raise self._fatal
        if exit_failed is not None:
            raise exit_failed

    def _exit_hook(self) -> HookFailed | None:
        """Run worker_exit; its failure is logged here and raised by run() (if nothing
        else is being raised)."""
        if self.hooks.worker_exit is None:
            return None
        try:
            call_hook("worker_exit", self.hooks.worker_exit)
        except HookFailed as err:
            log.error("worker %s: %s", self.identity.owner, err)
            return err
        return None

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"jobfsm-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _install_signals(self) -> dict[int, Any]:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            first = not self._shared.stopping.is_set()
            log.warning(
                "worker %s: signal %d: %s",
                self.identity.owner,
                signum,
                "draining" if first else "stopping now",
            )
            self.stop(now=not first)

        previous: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    # --- shutdown --------------------------------------------------------------------

    def _give_up(self, runs: list[Run]) -> None:
        """Expire the jobs hard-cancelled at shutdown now, with the reason in the audit.

        One try each: if the store is away, recovery by another worker does it later
        (by pid on this host, by lease elsewhere).
        """
        for run in runs:
            try:
                job = self.engine.get(run.job.id)
                if job.owner != self.identity.owner or job.fence != run.job.fence:
                    continue
                self.engine.expire_seen(job, verdict="dead", reason=run.dropped or "shutdown")
            except Exception as err:
                log.warning("job %s: left to recovery by others: %s", run.job.id, err)

    def _shutdown(self) -> None:
        s = self._shared
        s.stopping.set()
        deadline = time.monotonic() + self.shutdown_grace
        while s.runs.count() and not s.hard_stop.is_set() and time.monotonic() < deadline:
            s.runs.freed.wait(0.05)
            s.runs.freed.clear()
        left = s.runs.unreported()
        for run in left:
            reason = (
                "worker stopped at once"
                if s.hard_stop.is_set()
                else f"worker shut down; shutdown grace of {self.shutdown_grace}s passed"
            )
            s.runs.drop_at_shutdown(run, reason)
            run.cancelled.set()
            log.warning("job %s: %s; hard-cancelled, left to recovery", run.job.id, reason)
            if s.executor is not None:
                s.executor.cancel(run.job.id, fence=run.job.fence, hard=True, reason=reason)
            s.runs.finish(run, abandoned=reason)
        # Let the reporter write what already finished, within a bound.
        drain_until = time.monotonic() + min(DRAIN_REPORTS, self.engine.policy.lease.ttl)
        while (not s.outcomes.empty() or s.runs.count()) and time.monotonic() < drain_until:
            time.sleep(0.02)
        s.quiet.set()
        for t in self._threads:
            t.join(timeout=5.0)
        self._give_up(left)
        if s.executor is not None:
            s.executor.shutdown(wait=1.0)
        if s.delivery is not None:
            try:
                s.delivery.close()
            except Exception:
                log.exception("closing the delivery failed")
        if s.liveness is not None:
            try:
                s.liveness.release(self.identity.owner)
            except Exception:
                log.exception("releasing the liveness token failed")
        log.info("worker %s stopped", self.identity.owner)
