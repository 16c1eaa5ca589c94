"""The Worker: claims jobs, runs their handlers, renews leases, recovers the dead.

Threads of one worker (docs/workers.md has the picture):

- the claim loop (`run()`'s thread): waits for a wake-up and a free slot, claims
  a batch, starts it (one batched write) and hands each attempt to the executor;
- the reporter: turns finished attempts into engine reports, batched;
- the heartbeat: renews every held lease in one call per interval, and notices
  cancel requests and lost leases;
- the sweeper: every `recovery.sweep_interval` (jittered) expires lapsed leases and
  the jobs of owners confirmed dead (`fsm.owner`), and fails passed deadlines.

The worker never writes a state: every change goes through the Engine, and so
through `fsm.lifecycle.core.decide` with compare-and-set.
"""

from __future__ import annotations

import logging
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

from . import jsonio
from .context import Context, Handler, run_attempt
from .engine import Engine, RecoveryReport
from .errors import (
    BadInput,
    IllegalTransition,
    JobFSMError,
    LeaseLost,
    PayloadError,
    StoreError,
)
from .handlers import Handlers, HandlerSpec
from .owner import Identity, Status, current
from .ports import Attempt, Executor, ExecutorFull, Outcome, ScanRequest, WorkerDelivery
from .records import Job
from .registry import load_delivery, load_executor

log = logging.getLogger(__name__)

#: Defaults, each a keyword of Worker (docs/workers.md lists them all).
DEFAULT_CONCURRENCY = 4
DEFAULT_POLL_INTERVAL = 1.0  # longest wait for a wake-up before claiming anyway
DEFAULT_CANCEL_GRACE = 5.0  # seconds between a seen cancel request and a hard stop
DEFAULT_REPORT_BATCH = 256  # most reports written in one store transaction
BACKOFF_START = 0.05  # first pause after a store error in a loop
BACKOFF_CAP = 5.0  # longest pause after repeated store errors
SWEEP_LIMIT = 1000  # most jobs one sweep looks at
RELEASE_TRIES = 3  # bounded tries to give back an unstarted lease at shutdown
BATCH_WINDOW = 0.02  # longest wait to gather claims or reports into one batch


class _Run:
    """The worker's bookkeeping for one attempt in flight."""

    __slots__ = (
        "cancel_seen",
        "cancelled",
        "ctx",
        "dropped",
        "hard",
        "job",
        "lease_lost",
        "lost",
        "reporting",
        "spec",
    )

    def __init__(self, job: Job, spec: HandlerSpec | None) -> None:
        self.job = job
        self.spec = spec
        self.cancelled = threading.Event()
        self.lease_lost = threading.Event()
        self.ctx = Context(job, self.cancelled, self.lease_lost)
        self.cancel_seen: float | None = None  # monotonic time the cancel request was seen
        self.hard = False  # a hard stop was asked of the executor
        self.lost = False  # the lease is gone: the result is discarded
        self.dropped: str | None = None  # left to recovery at shutdown, with the reason
        self.reporting = False


def _backoff(step: int) -> float:
    return float(min(BACKOFF_CAP, BACKOFF_START * 2.0**step) * random.uniform(0.5, 1.0))


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
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        for name, value in (("poll_interval", poll_interval), ("cancel_grace", cancel_grace)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.engine = engine
        self.queues = tuple(queues)
        self.concurrency = concurrency
        self.identity = identity or current()
        self.poll_interval = poll_interval
        self.cancel_grace = cancel_grace
        self.shutdown_grace = (
            engine.policy.limits.shutdown_grace if shutdown_grace is None else shutdown_grace
        )
        self.report_batch = max(1, report_batch)
        self.install_signals = install_signals
        self.handlers = Handlers()
        for kind, fn in (handlers or {}).items():
            self._add(fn if isinstance(fn, HandlerSpec) else self.handlers.register(kind, fn))
        self._executor_ref = executor
        self._delivery_ref = delivery
        self.executor: Executor | None = None
        self.delivery: WorkerDelivery | None = None
        self.liveness: Any = getattr(engine.store, "liveness", None)

        self._lock = threading.Lock()
        self._running: dict[str, _Run] = {}
        # C-implemented: a put and a get cost a fraction of queue.Queue's (one of each per job)
        self._outcomes: queue.SimpleQueue[tuple[_Run, Outcome]] = queue.SimpleQueue()
        self._slot_freed = threading.Event()
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._liveness_lost = threading.Event()
        self._quiet = threading.Event()  # heartbeat and sweeper stop
        self._threads: list[threading.Thread] = []
        self._store_ok = False
        #: the last claim failed: a sweep that works does not make the worker ready
        self._claim_failing = False
        self._started = threading.Event()
        self._finished = threading.Event()
        self.last_sweep: RecoveryReport | None = None

    # --- handlers --------------------------------------------------------------------

    def _add(self, spec: HandlerSpec) -> None:
        self.handlers._specs[spec.kind] = spec
        self.engine.register_kind(spec.kind, spec.policy)

    def register(self, kind: str, fn: Handler, **opts: Any) -> HandlerSpec:
        spec = self.handlers.register(kind, fn, **opts)
        self._add(spec)
        return spec

    def handler(self, kind: str, **opts: Any) -> Callable[[Handler], Handler]:
        """`@worker.handler("kind", retry_safe=..., timeout=..., max_attempts=..., queue=...)`."""

        def decorate(fn: Handler) -> Handler:
            self.register(kind, fn, **opts)
            return fn

        return decorate

    # --- state -------------------------------------------------------------------------

    @property
    def owner(self) -> Any:
        return self.identity.owner

    @property
    def ready(self) -> bool:
        """True while this worker can lease: running, store reachable, delivery ready."""
        return (
            self._started.is_set()
            and not self._stopping.is_set()
            and self._store_ok
            and not self._liveness_lost.is_set()
            and self.delivery is not None
            and bool(self.delivery.ready)
        )

    @property
    def running(self) -> dict[str, Job]:
        with self._lock:
            return {k: r.job for k, r in self._running.items()}

    def wait_started(self, timeout: float) -> bool:
        return self._started.wait(timeout)

    def stop(self, *, now: bool = False) -> None:
        """Stop leasing and drain (within the shutdown grace); `now=True` skips the drain."""
        self._stopping.set()
        if now:
            self._hard_stop.set()
        self._slot_freed.set()
        if self.delivery is not None:
            wake = getattr(self.delivery, "wake", None)
            if callable(wake):
                wake()

    # --- run ---------------------------------------------------------------------------

    def _open(self) -> None:
        ex = self._executor_ref
        if ex is None or isinstance(ex, str):
            ex = load_executor(ex or "thread")()
        self.executor = ex
        self.executor.start(self.concurrency)
        dl = self._delivery_ref
        if isinstance(dl, str) and dl != "poll":
            raise BadInput(
                f"delivery {dl!r}: only 'poll' can be named; pass other deliveries as objects "
                "(e.g. RabbitDelivery(url, engine=engine))"
            )
        if dl is None or isinstance(dl, str):
            factory = load_delivery("poll")
            dl = factory(self.engine.store, poll_interval=self.poll_interval)
        self.delivery = dl
        self.delivery.start(self.queues)

    def run(self) -> None:
        """Work until stopped; on the main thread SIGTERM/SIGINT drain, a second one stops."""
        previous = self._install_signals()
        try:
            self._open()
            if self.liveness is not None:
                try:
                    self.liveness.hold(self.identity.owner, self._on_liveness_lost)
                except Exception as err:  # the claim loop keeps trying, with backoff
                    log.warning("worker: liveness token not taken yet: %s", err)
                    self._liveness_lost.set()
            self._spawn("reporter", self._report_loop)
            self._spawn("heartbeat", self._heartbeat_loop)
            self.sweep()  # start-up: reclaim at once the jobs of dead local processes
            self._store_ok = True  # the store answered: ready before any job arrives
            self._spawn("sweeper", self._sweep_loop)
            self._started.set()
            log.info(
                "worker %s started: queues %s, concurrency %d",
                self.identity.owner,
                ",".join(self.queues),
                self.concurrency,
            )
            self._claim_loop()
        finally:
            try:
                self._shutdown()
            finally:
                self._restore_signals(previous)
                self._finished.set()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"jobfsm-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _install_signals(self) -> dict[int, Any]:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            first = not self._stopping.is_set()
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

    # --- claiming ----------------------------------------------------------------------

    def _free(self) -> int:
        assert self.executor is not None
        with self._lock:
            busy = len(self._running)
        return max(0, min(self.executor.free, self.concurrency - busy))

    def _claim_loop(self) -> None:
        assert self.delivery is not None
        errors = 0
        immediate = True
        while not self._stopping.is_set():
            if self._liveness_lost.is_set() and not self._regain_liveness():
                self._stopping.wait(_backoff(errors))
                errors += 1
                continue
            free = self._free()
            if free == 0:
                self._slot_freed.wait(self.poll_interval)
                self._slot_freed.clear()
                continue
            if immediate:
                free = self._gather_slots(free)
            try:
                wakeups = self.delivery.poll(free, 0.0 if immediate else self.poll_interval)
                self.delivery.check()
            except JobFSMError:
                raise
            except Exception:
                log.exception("worker %s: delivery poll failed", self.identity.owner)
                self._stopping.wait(_backoff(errors))
                errors += 1
                continue
            if self._stopping.is_set() or not wakeups:
                immediate = False
                continue
            ids = [w.job_id for w in wakeups if w.job_id is not None]
            any_due = len(ids) < len(wakeups)
            try:
                jobs = self._claim(ids, any_due, free)
            except Exception as err:
                self._store_ok = False
                self._claim_failing = True
                level = logging.WARNING if isinstance(err, StoreError) else logging.ERROR
                log.log(level, "worker %s: claim failed: %s", self.identity.owner, err)
                self._stopping.wait(_backoff(errors))
                errors += 1
                continue
            errors = 0
            self._store_ok = True
            self._claim_failing = False
            claimed = {j.id for j in jobs}
            for w in wakeups:
                try:
                    self.delivery.settle(w, claimed=w.job_id in claimed)
                except Exception:
                    log.exception("worker %s: settling a wake-up failed", self.identity.owner)
            self._dispatch(jobs)
            immediate = any_due and len(jobs) >= free  # more may be due: no sleep

    def _gather_slots(self, free: int) -> int:
        """Under load, wait up to BATCH_WINDOW for half the slots, so claims come in batches."""
        half = self.concurrency // 2
        until = time.monotonic() + BATCH_WINDOW
        while free < half and self._busy() and not self._stopping.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            self._slot_freed.wait(left)
            self._slot_freed.clear()
            free = self._free()
        return free

    def _claim(self, ids: list[str], any_due: bool, free: int) -> list[Job]:
        owner = self.identity.owner
        with self.identity.claiming():
            jobs: list[Job] = []
            if ids:
                jobs += self.engine.claim(owner, self.queues, limit=len(ids), ids=ids)
            left = free - len(jobs)
            if any_due and left > 0:
                jobs += self.engine.claim(owner, self.queues, limit=left)
            for job in jobs:
                self.identity.hold(job.id, job.fence)
        return jobs

    def _dispatch(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        if self._stopping.is_set() or self._liveness_lost.is_set():
            self._release(jobs)  # claimed just as we stopped or lost the liveness token
            return
        results = self._with_retries(
            "start",
            lambda: self.engine.report_many([(j, "start", {"fence": j.fence}) for j in jobs]),
        )
        if results is None:
            for job in jobs:  # the store is away: the leases lapse and recovery requeues
                self.identity.drop(job.id, abandoned="could not start: store unreachable")
            return
        for job, started in zip(jobs, results, strict=True):
            if not isinstance(started, Job):
                self.identity.drop(job.id)
                log.warning(
                    "worker %s: could not start job %s: %s", self.identity.owner, job.id, started
                )
                continue
            self._launch(started)

    def _launch(self, job: Job) -> None:
        assert self.executor is not None
        spec = self.handlers.get(job.kind)
        run = _Run(job, spec)
        with self._lock:
            self._running[job.id] = run
        if spec is None:
            known = ", ".join(sorted(self.handlers)) or "none"
            self._outcomes.put(
                (
                    run,
                    Outcome(
                        status="permanent",
                        error=f"no handler for kind {job.kind!r} on this worker "
                        f"(it handles: {known})",
                    ),
                )
            )
            return
        timeout = job.timeout or spec.policy.timeout or self.engine.policy.limits.attempt_timeout
        limit = self.engine.policy.limits.max_payload_bytes
        fn, ctx = spec.fn, run.ctx
        attempt = Attempt(
            job=job,
            timeout=float(timeout),
            target=spec.target,
            run=lambda: run_attempt(fn, ctx, limit),
            cancelled=run.cancelled,
        )
        try:
            self.executor.submit(attempt, lambda _a, outcome: self._outcomes.put((run, outcome)))
        except ExecutorFull:
            with self._lock:
                self._running.pop(job.id, None)
            log.error("worker %s: executor full; giving back job %s", self.identity.owner, job.id)
            self._release([job])

    def _release(self, jobs: list[Job]) -> None:
        for job in jobs:
            for step in range(RELEASE_TRIES):
                try:
                    self.engine.release(job.id, job.fence)
                    break
                except (LeaseLost, IllegalTransition):
                    break
                except Exception as err:
                    log.warning(
                        "worker %s: release of %s failed: %s", self.identity.owner, job.id, err
                    )
                    time.sleep(_backoff(step))
            self.identity.drop(job.id)

    # --- reporting ---------------------------------------------------------------------

    def _report_loop(self) -> None:
        while True:
            try:
                first = self._outcomes.get(timeout=0.2)
            except queue.Empty:
                if self._finished.is_set() or (self._quiet.is_set() and not self._busy()):
                    return
                continue
            batch = [first]
            until = time.monotonic() + BATCH_WINDOW
            while len(batch) < self.report_batch:
                try:
                    batch.append(self._outcomes.get_nowait())
                    continue
                except queue.Empty:
                    pass
                left = until - time.monotonic()
                if left <= 0 or len(batch) >= self._in_flight():
                    break  # nothing more is running: report now
                try:
                    batch.append(self._outcomes.get(timeout=left))
                except queue.Empty:
                    break
            try:
                self._report(batch)
            except Exception:
                log.exception("worker %s: reporting failed", self.identity.owner)

    def _in_flight(self) -> int:
        with self._lock:
            return sum(1 for r in self._running.values() if not r.reporting)

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._running)

    def _finish(self, run: _Run, *, abandoned: str | None = None) -> None:
        with self._lock:
            if self._running.get(run.job.id) is run:
                del self._running[run.job.id]
        self.identity.drop(run.job.id, abandoned=abandoned)
        self._slot_freed.set()

    def _event_for(self, run: _Run, outcome: Outcome) -> tuple[str, dict[str, Any]] | None:
        """The engine report for an outcome, or None when there is nothing to report."""
        fence = run.job.fence
        status = outcome.status
        if status == "succeeded":
            return "succeed", {"fence": fence, "result_json": outcome.result_json or "null"}
        if run.cancel_seen is not None and status in ("cancelled", "killed", "failed", "timeout"):
            try:  # the partial result kept is the latest progress the handler recorded
                partial = jsonio.encode(
                    run.ctx.last_progress,
                    what=f"progress of job {run.job.id}",
                    limit=self.engine.policy.limits.max_payload_bytes,
                )
            except PayloadError:
                partial = "null"
            return "cancelled_ack", {"fence": fence, "result_json": partial}
        if status == "retry":
            return "fail", {"fence": fence, "error": outcome.error, "delay": outcome.delay}
        if status == "permanent":
            return "fail", {"fence": fence, "error": outcome.error, "permanent": True}
        if status == "ambiguous":
            return "ambiguous", {"fence": fence, "error": outcome.error}
        if status == "abandoned":
            return None
        error = outcome.error or status
        if status == "cancelled":
            error = f"handler stopped without a cancel request: {error}"
        return "fail", {"fence": fence, "error": error}

    def _report(self, batch: list[tuple[_Run, Outcome]]) -> None:
        metrics = self.engine.metrics
        reports: list[tuple[Job, str, Mapping[str, Any]]] = []
        runs: list[_Run] = []
        for run, outcome in batch:
            if metrics is not None:
                metrics.attempt_seconds(run.job.kind, outcome.status, outcome.seconds)
            with self._lock:
                discard = run.lost or run.dropped is not None
                run.reporting = not discard
            if discard:
                log.info(
                    "job %s: %s result discarded (%s)",
                    run.job.id,
                    outcome.status,
                    run.dropped or "lease lost",
                )
                self._finish(run)
                continue
            event = self._event_for(run, outcome)
            if event is None:
                reason = f"attempt abandoned: {outcome.error or 'could not be stopped'}"
                log.warning("job %s: %s; left to recovery", run.job.id, reason)
                self._finish(run, abandoned=reason)
                continue
            reports.append((run.job, event[0], event[1]))
            runs.append(run)
        if not reports:
            return
        try:
            results = self._with_retries("report", lambda: self.engine.report_many(reports))
        except Exception:
            log.exception("worker %s: reporting %d outcomes failed", self.identity.owner, len(runs))
            results = None
        if results is None:
            for run in runs:  # the store stayed away: the leases lapse, recovery decides
                self._finish(run, abandoned="the result could not be reported")
            return
        for run, result in zip(runs, results, strict=True):
            if isinstance(result, LeaseLost):
                log.info("job %s: report discarded: %s", run.job.id, result)
            elif not isinstance(result, Job):
                log.warning("job %s: report failed: %s", run.job.id, result)
            self._finish(run)

    def _with_retries(self, what: str, call: Callable[[], list[Any]]) -> list[Any] | None:
        """Retry a store call with bounded backoff for at most one lease TTL."""
        deadline = time.monotonic() + self.engine.policy.lease.ttl
        step = 0
        while True:
            try:
                out = call()
                self._store_ok = True
                return out
            except StoreError as err:
                self._store_ok = False
                if not err.retryable or time.monotonic() >= deadline or self._hard_stop.is_set():
                    log.error("worker %s: %s failed: %s", self.identity.owner, what, err)
                    return None
                log.warning("worker %s: %s failed, retrying: %s", self.identity.owner, what, err)
                time.sleep(_backoff(step))
                step += 1

    # --- heartbeats, cancels, lost leases ------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = self.engine.policy.lease.heartbeat_interval
        ttl = self.engine.policy.lease.ttl
        last_ok = time.monotonic()
        while not self._quiet.wait(interval):
            try:
                self.heartbeat()
                last_ok = time.monotonic()
            except Exception as err:
                self._store_ok = False
                log.warning("worker %s: heartbeat failed: %s", self.identity.owner, err)
                if time.monotonic() - last_ok >= ttl:
                    # Unrenewed for a whole TTL: others may own these jobs now.
                    for run in self._snapshot():
                        self._lose(run, f"heartbeats failed for {ttl}s")

    def _snapshot(self) -> list[_Run]:
        with self._lock:
            return [r for r in self._running.values() if not r.reporting and not r.lost]

    def heartbeat(self) -> None:
        """Renew every held lease at once; act on cancel requests and lost leases."""
        runs = self._snapshot()
        now = time.monotonic()
        if runs:
            renewed = self.engine.heartbeat(
                self.identity.owner, {r.job.id: r.job.fence for r in runs}
            )
            self._store_ok = True
            for run in runs:
                state = renewed.get(run.job.id)
                if state is None:
                    with self._lock:
                        if run.reporting:
                            continue
                    self._lose(run, "heartbeat found the lease taken")
                elif state == "cancelling" and run.cancel_seen is None:
                    run.cancel_seen = now
                    run.cancelled.set()
                    assert self.executor is not None
                    self.executor.cancel(run.job.id, reason="cancel requested")
                    log.info("job %s: cancel request seen; handler asked to stop", run.job.id)
        for run in self._snapshot():
            if (
                run.cancel_seen is not None
                and not run.hard
                and now - run.cancel_seen >= self.cancel_grace
            ):
                run.hard = True
                assert self.executor is not None
                log.warning(
                    "job %s: still running %.1fs after its cancel request; stopping it",
                    run.job.id,
                    now - run.cancel_seen,
                )
                self.executor.cancel(run.job.id, hard=True, reason="cancel grace passed")

    def _lose(self, run: _Run, reason: str) -> None:
        with self._lock:
            if run.lost:
                return
            run.lost = True
        run.lease_lost.set()
        run.cancelled.set()
        log.warning(
            "job %s: lease lost (%s); stopping its handler, result discarded", run.job.id, reason
        )
        if self.executor is not None:
            self.executor.cancel(run.job.id, hard=True, reason=f"lease lost: {reason}")
        self._finish(run)

    def _on_liveness_lost(self) -> None:
        """The liveness token is gone: every lease may be taken over now. Stop them all."""
        self._liveness_lost.set()
        self._store_ok = False
        with self._lock:
            runs = list(self._running.values())
        for run in runs:
            self._lose(run, "liveness connection lost")

    def _regain_liveness(self) -> bool:
        """Take a liveness token again, as a new incarnation (the old one counts as dead)."""
        if self._busy():
            return False
        try:
            if self.liveness is not None:
                self.liveness.release(self.identity.owner)
                owner = self.identity.renew_incarnation()
                self.liveness.hold(owner, self._on_liveness_lost)
                log.warning("worker: liveness token taken as incarnation %s", owner)
        except Exception as err:
            log.warning("worker %s: liveness not regained yet: %s", self.identity.owner, err)
            return False
        self._liveness_lost.clear()
        return True

    # --- recovery ------------------------------------------------------------------

    def _sweep_loop(self) -> None:
        base = self.engine.policy.recovery.sweep_interval
        errors = 0
        while not self._quiet.wait(base * random.uniform(0.5, 1.5)):
            try:
                self.sweep()
                errors = 0
                if not self._claim_failing:
                    self._store_ok = True  # an idle worker (no claims) stays ready
            except Exception as err:
                self._store_ok = False
                errors += 1
                log.warning("worker %s: recovery sweep failed: %s", self.identity.owner, err)
                self._quiet.wait(_backoff(errors))

    def sweep(self) -> RecoveryReport:
        """Expire lapsed leases and the jobs of owners confirmed dead; fail passed deadlines."""
        lapsed = self.engine.recover(limit=SWEEP_LIMIT)
        probe = None if self.liveness is None else self.liveness.probe
        states = self.engine._leased_states
        expired = to_investigate = 0
        verdicts: dict[Any, Any] = {}
        seen: set[str] = set()
        # This host's jobs first (deaths here are confirmed by pid, so they are
        # recovered at once even when more than SWEEP_LIMIT jobs are leased), then any.
        local = ScanRequest(states=states, owner_host=self.identity.host, limit=SWEEP_LIMIT)
        anywhere = ScanRequest(states=states, limit=SWEEP_LIMIT)
        for job in [*self.engine.scan(local), *self.engine.scan(anywhere)]:
            owner = job.owner
            if owner is None or job.id in seen:
                continue
            seen.add(job.id)
            if owner == self.identity.owner:
                verdict = self.identity.judge(owner, job.id, probe)
            else:
                if owner not in verdicts:
                    verdicts[owner] = self.identity.judge(owner, job.id, probe)
                verdict = verdicts[owner]
            if verdict.status is not Status.DEAD:
                continue
            new = self.engine.expire_seen(job, verdict="dead", reason=verdict.reason)
            if new is not None:
                expired += 1
                to_investigate += new.state == "investigate"
                log.warning("job %s: recovered from dead owner: %s", job.id, verdict.reason)
        report = RecoveryReport(
            expired=lapsed.expired + expired,
            deadlines=lapsed.deadlines,
            to_investigate=lapsed.to_investigate + to_investigate,
            errors=lapsed.errors,
        )
        self.last_sweep = report
        if report.expired and self.delivery is not None:
            wake = getattr(self.delivery, "wake", None)
            if callable(wake):
                wake()  # recovered jobs are due now: claim without waiting for the poll
        return report

    # --- shutdown --------------------------------------------------------------------

    def _give_up(self, runs: list[_Run]) -> None:
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
        self._stopping.set()
        deadline = time.monotonic() + self.shutdown_grace
        while self._busy() and not self._hard_stop.is_set() and time.monotonic() < deadline:
            self._slot_freed.wait(0.05)
            self._slot_freed.clear()
        with self._lock:
            left = [r for r in self._running.values() if not r.reporting]
        for run in left:
            reason = (
                "worker stopped at once"
                if self._hard_stop.is_set()
                else f"worker shut down; shutdown grace of {self.shutdown_grace}s passed"
            )
            with self._lock:
                run.dropped = reason
            run.cancelled.set()
            log.warning("job %s: %s; hard-cancelled, left to recovery", run.job.id, reason)
            if self.executor is not None:
                self.executor.cancel(run.job.id, hard=True, reason=reason)
            self._finish(run, abandoned=reason)
        # Let the reporter write what already finished, within a bound.
        drain_until = time.monotonic() + min(5.0, self.engine.policy.lease.ttl)
        while (not self._outcomes.empty() or self._busy()) and time.monotonic() < drain_until:
            time.sleep(0.02)
        self._quiet.set()
        for t in self._threads:
            t.join(timeout=5.0)
        self._give_up(left)
        if self.executor is not None:
            self.executor.shutdown(wait=1.0)
        if self.delivery is not None:
            try:
                self.delivery.close()
            except Exception:
                log.exception("closing the delivery failed")
        if self.liveness is not None:
            try:
                self.liveness.release(self.identity.owner)
            except Exception:
                log.exception("releasing the liveness token failed")
        log.info("worker %s stopped", self.identity.owner)
