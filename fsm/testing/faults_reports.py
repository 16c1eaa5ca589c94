"""The `reports` fault model: a real worker reports how its handlers ended, through
store faults on the report path, against the documented mapping of outcomes.

Each example opens a fresh database and runs a `fsm.worker.Worker` (threads, wall
clock, the thread executor) over a small batch of jobs in a queue of its own.
Hypothesis draws, per job, how its handler ends, through the handler API
applications use (docs/workers.md, "Outcomes"): it returns a result (small, exactly
at the payload limit, one byte over it), raises `Retry(after=)`, `Permanent`,
`Ambiguous` or another error, saves progress and stops after a cancel request
(`ctx.check_cancelled()`), saves progress and fails right after a cancel request the
worker may not have seen yet, or ignores the cancel and returns a value. The cancels
are requested through the Engine while the handlers run. On the report path it draws
one store fault: none, the store's writes failing transiently 1 to 3 times (below
the worker's bound of one lease TTL), or failing until the bound has passed (the
store stays away); and some jobs are taken over by another owner (expired as dead,
leased again with the next fence and started) just before their report is written.
Where no report write fails, the store's writes of the handlers' progress
(`fsm.worker.saving`: with the heartbeats, and once more before the report) fail 1
to 3 times in some examples, before reaching the store, as a lost connection.

The oracle is written here from docs/workers.md and specs/job.toml, never from the
worker's own mapping (`Reporter.event_for`):

- E1 each outcome reaches the store as its documented event and state: a returned
  value is kept (`succeeded`, up to the payload limit inclusive), a result over the
  limit fails the job permanently, `Retry(after=s)` waits `retry_wait` exactly `s`
  after the report, `Permanent` fails it, `Ambiguous` sends it to `investigate`,
  another error is retried after the backoff, and after a cancel request the job
  ends `cancelled` with the latest progress as its partial result (or the returned
  value, if the handler returned one); the latest progress is stored with the job;
- E2 a report refused because another owner took the job over changes nothing
  (the job stays running under the new owner and fence, the report is recorded as
  rejected) and its run is finished;
- E3 when the store stays away past the bound nothing is reported, the worker holds
  no run for the job any more, and the job is left to recovery: still live
  (running, or cancelling) under the same owner and fence;
- E4 once every outcome is handled, the worker holds no run (its table of runs and
  its identity's registry of held runs are empty);
- E5 progress whose write failed is written again (with a later heartbeat, or with
  the report): the latest progress a handler gave is stored with its job, however
  the attempt ended; a progress write is never taken as done before the store did it.

The model runs on wall-clock time (heartbeats every 0.1 s, so the worker sees a
cancel request soon), so its examples are few; it runs the same against every store.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from hypothesis import example, given
from hypothesis import strategies as st

from ..errors import Ambiguous, JobFSMError, Permanent, Retry, StoreError, TransientStoreError
from ..inputs import KindPolicy
from ..policies import Backoff, LeasePolicy, Limits, Policy, RecoveryPolicy, RetryPolicy
from ..ports import ClaimRequest, Store, StoresProgress
from ..records import Decision, Job, Owner
from ..service.engine import Engine
from ..service.identity import Identity
from ..worker import Worker
from .faults_models import ModelRun

KIND = "reports.job"
#: the payload limit of the model's policy: a result of exactly LIMIT bytes is kept
LIMIT = 64
TTL = 0.8  # the lease TTL, and so the worker's bound on retrying a report
BEAT = 0.1  # the heartbeat interval: how soon the worker sees a cancel request
BACKOFF = 600.0  # the retry delay of a handler that raised (no jitter): never due here
WAIT = 10.0  # bound on any wait of the model
#: how much less than one TTL may pass between a report's first and last failed write
#: when the worker gives it up (the bound runs from just before the first try)
BOUND_SLACK = 0.1
#: the events a worker reports for an attempt (docs/workers.md, "Outcomes")
REPORTS = frozenset({"succeed", "fail", "ambiguous", "cancelled_ack"})
#: another worker, which takes some jobs over just before their report is written
OTHER = Owner("reports-model-other", 1, "other")

ENDINGS = (
    "small",  # returns a small JSON value
    "at_limit",  # returns a value whose JSON is exactly LIMIT bytes
    "over_limit",  # one byte over
    "retry",  # raises Retry(after=s)
    "permanent",  # raises Permanent
    "ambiguous",  # raises Ambiguous
    "raises",  # raises another error
    "cancel_stop",  # saves progress, stops after the cancel request (check_cancelled)
    "cancel_fail",  # saves progress, fails at once after the cancel request
    "cancel_ignore",  # ignores the cancel request and returns a value
)
CANCELS = frozenset({"cancel_stop", "cancel_fail", "cancel_ignore"})
RETRY_AFTER = (60.0, 3600.0)


class _Ahead:
    """The wall clock, `seconds` ahead: the other owner leases a job the recovery
    made due again later than now, and its lease lasts well past the example."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def now(self) -> float:
        return time.time() + self.seconds

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ReportPath:
    """The worker's store: its writes of reports fail `failures` times (all of them
    while `away` is set), and a job of `take_over` is taken over by another owner just
    before its report is written (the worker's claims wait meanwhile, so the job
    made due again by the takeover's expiry goes to the other owner, not back to it)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failures = 0
        self.away = threading.Event()
        self.take_over: dict[str, Callable[[], None]] = {}
        #: how many more writes of progress fail, and the jobs whose writes failed
        self.progress_failures = 0
        self.progress_failed: set[str] = set()
        self._gate = threading.Lock()

    def apply(self, decisions: Any) -> Any:
        reports = [d for d in decisions if isinstance(d, Decision) and d.event in REPORTS]
        if reports:
            if self.away.is_set() or self.failures > 0:
                self.failures -= 1
                raise TransientStoreError("report write fails (reports fault model)")
            with self._gate:
                for d in reports:
                    take = self.take_over.pop(d.job.id, None)
                    if take is not None:
                        take()
        return self._store.apply(decisions)

    def claim(self, request: ClaimRequest) -> list[Job]:
        with self._gate:
            return self._store.claim(request)

    def _save_progress(self, save: Callable[[Any], list[str]]) -> Callable[[Any], list[str]]:
        def failing(request: Any) -> list[str]:
            if self.progress_failures > 0:
                self.progress_failures -= 1
                self.progress_failed.update(request.items)
                raise TransientStoreError("progress write fails (reports fault model)")
            return save(request)

        return failing

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        # only a store that keeps progress has save_progress: the wrapper adds none
        return self._save_progress(found) if name == "save_progress" else found


class Reporting(Engine):
    """The worker's engine, which notes when each job's report failed to be written as
    the worker meets it: `report_many` raised a store error (nothing of the batch was
    written; the worker tries the batch again within its bound).

    Noted here, not per decision at the store: a report the engine cannot decide on the
    record the worker holds (it moved: a cancel request the heartbeat saw) is decided on
    the stored record and written only after the batch's first write went through, so
    while the store fails that write the report never reaches it, though the worker
    tries it with its batch for the whole bound (E3)."""

    def __init__(self, store: Any, **options: Any) -> None:
        super().__init__(store, **options)
        #: per job, when each write of its report failed (time.monotonic)
        self.failed: dict[str, list[float]] = {}

    def report_many(
        self, reports: Sequence[tuple[Job, str, Mapping[str, Any]]]
    ) -> list[Job | JobFSMError]:
        try:
            return super().report_many(reports)
        except StoreError:
            now = time.monotonic()
            for job, _, _ in reports:
                self.failed.setdefault(job.id, []).append(now)
            raise


#: a plan: endings, Retry(after=) per job, report fault, its count, jobs taken over,
#: progress writes that fail
Plan = tuple[list[str], list[float], str, int, list[int], int]


@st.composite
def _plans(draw: st.DrawFn) -> Plan:
    endings = draw(st.lists(st.sampled_from(ENDINGS), min_size=2, max_size=4))
    afters = [draw(st.sampled_from(RETRY_AFTER)) for _ in endings]
    # the store stays away in one example in eight (each costs a lease TTL of retries
    # per batch; an explicit example always has it)
    fault = draw(st.sampled_from(("none",) * 4 + ("transient",) * 3 + ("away",)))
    k = draw(st.integers(1, 3)) if fault == "transient" else 0
    takeable = [i for i, e in enumerate(endings) if e not in CANCELS]
    taken = []
    if takeable and draw(st.integers(0, 2)) == 0:  # one example in three: one job
        taken = [draw(st.sampled_from(takeable))]
    # progress writes fail where no report write does (their retries share its bound)
    progress = draw(st.sampled_from((0, 0, 1, 2, 3))) if fault == "none" else 0
    return endings, afters, fault, k, taken, progress


def _result(ending: str, i: int) -> Any:
    """What a returning handler returns: its JSON is small, exactly LIMIT bytes
    (a JSON string: two quotes and LIMIT - 2 characters) or one byte more."""
    if ending == "at_limit":
        return "a" * (LIMIT - 2)
    if ending == "over_limit":
        return "a" * (LIMIT - 1)
    return {"i": i, "ending": ending}


#: the explicit example of failed progress writes: the handlers that save progress
#: (odd jobs and cancels) save it before the heartbeats and the report write it
PROGRESS_FAILS: Plan = (
    ["small", "at_limit", "cancel_stop", "raises"],
    [60.0] * 4,
    "none",
    0,
    [],
    2,
)


class ReportsModel:
    name: ClassVar[str] = "reports"
    about: ClassVar[str] = "a real worker reports every kind of outcome through store faults"
    examples: ClassVar[dict[str, int]] = {"quick": 2, "default": 5, "thorough": 60}

    def run(self, ctx: ModelRun) -> None:
        # Thread timing steers which path a report takes (batched or not, a cancel
        # seen before or after the handler ended): keep the first failure rather
        # than let hypothesis replay it into a Flaky report.
        found: list[AssertionError] = []

        @ctx.settings(self.examples[ctx.size])
        @given(plan=_plans())
        # every ending at least once, and each fault on the report path
        @example(
            plan=(
                ["cancel_ignore", "cancel_fail", "cancel_stop", "at_limit"],
                [60.0] * 4,
                "none",
                0,
                [],
                0,
            )
        )
        @example(
            plan=(
                ["over_limit", "retry", "ambiguous", "raises"],
                [3600.0] * 4,
                "transient",
                3,
                [2],
                0,
            )
        )
        @example(plan=(["small", "permanent", "cancel_fail"], [60.0] * 3, "away", 0, [], 0))
        # progress writes fail: jobs 1 and 3 save progress once, job 2 twice
        @example(plan=PROGRESS_FAILS)
        def one(plan: Plan) -> None:
            if found:
                return
            try:
                run_plan(ctx, plan)
            except AssertionError as err:
                found.append(err)

        one()
        if found:
            raise found[0]


def run_plan(ctx: ModelRun, plan: Plan) -> None:
    """One example of the model on `ctx`'s database (its tests run examples one at a time)."""
    endings, afters, fault, k, taken, progress_faults = plan
    with ctx.database() as opener:
        _one(
            ctx,
            opener,
            endings,
            afters=afters,
            fault=fault,
            k=k,
            taken=taken,
            progress_faults=progress_faults,
        )


def _one(
    ctx: ModelRun,
    opener: Callable[[], Store],
    endings: list[str],
    *,
    afters: list[float],
    fault: str,
    k: int,
    taken: list[int],
    progress_faults: int = 0,
) -> None:
    stats, checks = ctx.stats, ctx.stats.checks
    raw = opener()
    path = ReportPath(raw)
    queue = f"reports-{uuid.uuid4().hex[:8]}"
    policy = Policy(
        seed=1,
        retry=RetryPolicy(backoff=Backoff(base=BACKOFF, jitter=False)),
        lease=LeasePolicy(ttl=TTL, heartbeat_interval=BEAT),
        recovery=RecoveryPolicy(sweep_interval=3600.0),  # nobody recovers a given-up job
        limits=Limits(max_payload_bytes=LIMIT, shutdown_grace=0.5),
    )
    kinds = {KIND: KindPolicy(queue=queue)}
    control = Engine(opener(), policy=policy, kinds=kinds)  # the operator and the oracle
    jobs = control.submit_many([(KIND, {"i": i}, {}) for i in range(len(endings))])
    index = {job.id: i for i, job in enumerate(jobs)}
    started = [threading.Event() for _ in endings]
    go = [threading.Event() for _ in endings]
    ended = [threading.Event() for _ in endings]
    progress: dict[int, dict[str, Any]] = {}  # the latest progress each handler saved
    contexts: dict[int, Any] = {}  # each handler's context (`ctx.lease_lost`)
    for e in endings:
        stats.faults[f"reports: a handler that ends {e}"] += 1

    def handler(run: Any) -> Any:
        i = index[run.job.id]
        ending = endings[i]
        contexts[i] = run
        try:
            if ending in CANCELS or i % 2:
                progress[i] = {"step": 1, "i": i}
                run.progress(**progress[i])
            started[i].set()
            go[i].wait(WAIT)
            if ending == "cancel_stop":
                progress[i] = {"step": 2, "i": i}
                run.progress(**progress[i])
                run.cancelled.wait(WAIT)
                run.check_cancelled()
                raise AssertionError("E0 ctx.cancelled was set, check_cancelled did not raise")
            if ending == "cancel_fail":
                raise RuntimeError(f"job {run.job.id} fails after a cancel request")
            if ending == "retry":
                raise Retry(after=afters[i])
            if ending == "permanent":
                raise Permanent(f"job {run.job.id} cannot be done")
            if ending == "ambiguous":
                raise Ambiguous(f"job {run.job.id}: the outside effect is unknown")
            if ending == "raises":
                raise ValueError(f"job {run.job.id} broke")
            return _result(ending, i)
        finally:
            ended[i].set()

    def take_over(job_id: str) -> Callable[[], None]:
        def take() -> None:
            control.expire(job_id, verdict="dead", reason="reports model: taken over")
            other = Engine(control.store, policy=policy, kinds=kinds, clock=_Ahead(3600.0))
            got = other.claim(OTHER, (queue,), ids=[job_id])
            if len(got) != 1:
                raise AssertionError(f"E0 job {job_id}: the other owner could not lease it")
            other.start(job_id, got[0].fence)
            stats.faults["reports: a job taken over just before its report"] += 1

        return take

    for i in taken:
        path.take_over[jobs[i].id] = take_over(jobs[i].id)
    path.failures = k
    path.progress_failures = progress_faults
    if progress_faults:
        stats.faults[f"reports: progress writes fail {progress_faults}"] += 1
    if fault == "away":
        path.away.set()
    if fault != "none":
        stats.faults[f"reports: report writes fail {'until the bound' if k == 0 else k}"] += 1

    engine = Reporting(path, policy=policy, kinds=kinds)
    identity = Identity()
    worker = Worker(
        engine,
        {KIND: handler},
        queues=(queue,),
        concurrency=len(endings),
        identity=identity,
        poll_interval=0.05,
        install_signals=False,
        scheduler=False,
    )
    thread = threading.Thread(target=worker.run, name="reports-model", daemon=True)
    thread.start()
    try:
        for i, job in enumerate(jobs):
            if not started[i].wait(WAIT):
                raise AssertionError(f"E0 job {job.id}: the worker never started it")
        held = {j.id: j for j in worker.running.values()}
        for i, job in enumerate(jobs):
            if endings[i] in CANCELS:
                control.cancel(job.id, actor="reports-model", reason="cancel while it runs")
                stats.faults["reports: a cancel requested while the handler runs"] += 1
        for event in go:
            event.set()
        for i, job in enumerate(jobs):
            if not ended[i].wait(WAIT):
                raise AssertionError(f"E0 job {job.id}: its handler never ended")
        # every outcome handled: the worker holds none of the example's runs
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and (
            set(worker.running) & set(index) or {r[0] for r in identity.held()} & set(index)
        ):
            time.sleep(0.02)
        left = sorted(set(worker.running) | {r[0] for r in identity.held()})
        if left:
            raise AssertionError(
                f"E4 the worker still holds runs of {left} {WAIT:g}s after their handlers "
                f"ended (fault {fault!r}, endings {endings})"
            )
        checks["E4 no run is held once every outcome is handled"] += 1
        for i, job in enumerate(jobs):
            _check(
                ctx,
                control,
                raw,
                job,
                held=held.get(job.id),
                ending=endings[i],
                after=afters[i],
                latest=progress.get(i),
                fault=fault,
                failed=engine.failed.get(job.id, []),
                lost=i in contexts and contexts[i].lease_lost.is_set(),
                # taken over only once a report write got through (the take-over runs
                # there): a job whose writes all failed is the store's staying away (E3)
                taken=i in taken and job.id not in path.take_over,
                progress_failed=job.id in path.progress_failed,
            )
    finally:
        path.away.clear()
        for event in go:
            event.set()
        worker.stop()
        thread.join(WAIT)


def _decoded(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _check(
    ctx: ModelRun,
    control: Engine,
    raw: Store,
    submitted: Job,
    *,
    held: Job | None,
    ending: str,
    after: float,
    latest: dict[str, Any] | None,
    fault: str,
    failed: list[float],
    lost: bool,
    taken: bool,
    progress_failed: bool = False,
) -> None:
    checks = ctx.stats.checks
    job = control.get(submitted.id)
    trail = control.history(job.id)
    ctx.coverage.trail(trail)
    if held is None:
        raise AssertionError(f"E0 job {job.id}: not among the worker's runs while it ran")
    fence = held.fence
    mine = [e for e in trail if e.event in REPORTS and e.fence == fence]
    applied = [e for e in mine if e.outcome == "applied"]
    what = f"job {job.id} (handler {ending}, fault {fault}{', taken over' if taken else ''})"
    if lost and not taken and not failed:
        # the worker's heartbeats fell a lease TTL behind (a loaded machine): it gave the
        # run up as lost and must report nothing (the worker model's W1-W2), so the
        # outcome is not judged here
        if applied:
            raise AssertionError(f"E2 {what}: a run given up as lost reported {applied[0].event}")
        ctx.stats.faults["reports: a run given up as lost (heartbeats fell behind)"] += 1
        return
    if taken:  # judged first: failed writes before it only delayed the refused one
        if applied or job.state != "running" or job.owner != OTHER or job.fence != fence + 1:
            raise AssertionError(
                f"E2 {what}: a report refused for a lost lease changed the job: {job.state}, "
                f"owner {job.owner}, fence {job.fence}, reports {[e.event for e in applied]}"
            )
        if not any(e.outcome == "rejected" for e in mine):
            raise AssertionError(f"E2 {what}: the stale report was not recorded as rejected")
        checks["E2 a report refused for a lost lease changes nothing"] += 1
        return
    # the worker retries a failed report write for one lease TTL (docs/workers.md): a
    # transient fault that outlasted it (the reporter thread starved on a loaded
    # machine) is the store staying away for this job
    spanned = bool(failed) and failed[-1] - failed[0] >= TTL - BOUND_SLACK
    if fault == "away" or (fault == "transient" and spanned and not applied):
        live = "cancelling" if ending in CANCELS else "running"
        if applied or job.state != live or job.fence != fence or job.owner != held.owner:
            raise AssertionError(
                f"E3 {what}: the store stayed away, yet the job is {job.state} under fence "
                f"{job.fence} (the run's {fence}), reports {[e.event for e in applied]}"
            )
        if not spanned:
            raise AssertionError(
                f"E3 {what}: its report was given up {failed[-1] - failed[0] if failed else 0:.2f}"
                f"s after its first failed write ({len(failed)} tries), before the bound of "
                f"one lease TTL ({TTL:g}s)"
            )
        checks["E3 a report past the bound is given up and left to recovery"] += 1
        return
    want_state, want_result = _expected(ending, submitted, latest)
    if job.state != want_state:
        raise AssertionError(
            f"E1 {what}: ended {job.state}, documented {want_state} "
            f"(trail {[(e.event, e.to_state, e.outcome) for e in trail]})"
        )
    if want_state in ("succeeded", "cancelled") and _decoded(job.result_json) != want_result:
        raise AssertionError(
            f"E1 {what}: result {job.result_json!r:.120}, documented {json.dumps(want_result)}"
        )
    if ending == "over_limit" and "limit" not in (job.last_error or ""):
        raise AssertionError(f"E1 {what}: failed without naming the limit: {job.last_error!r}")
    if want_state == "retry_wait":
        delay = after if ending == "retry" else BACKOFF
        fail = [e for e in applied if e.event == "fail"]
        if len(fail) != 1 or abs(job.run_after - (fail[0].at + delay)) > 0.01:
            raise AssertionError(
                f"E1 {what}: due {job.run_after - (fail[0].at if fail else 0):.3f}s after "
                f"its report, documented {delay:g}s"
            )
    checks[f"E1 a handler that ends {ending} leaves its job {want_state}"] += 1
    if latest is not None and isinstance(raw, StoresProgress):
        stored = _decoded(job.progress_json)
        code = "E5" if progress_failed else "E1"
        if not isinstance(stored, dict) or stored.get("progress") != latest:
            raise AssertionError(
                f"{code} {what}: stored progress {job.progress_json!r:.120}, the handler's "
                f"latest was {latest}"
                + (" (a write of its progress failed)" if progress_failed else "")
            )
        if progress_failed:
            checks["E5 the latest progress is stored though a write of it failed"] += 1
        else:
            checks["E1 the latest progress is stored with the job"] += 1


def _expected(ending: str, job: Job, latest: dict[str, Any] | None) -> tuple[str, Any]:
    """The documented end of an attempt (docs/workers.md, "Outcomes"; specs/job.toml):
    the job's state and, for a kept result, its JSON value."""
    if ending in ("small", "at_limit"):
        return "succeeded", _result(ending, _i(job))
    if ending in ("over_limit", "permanent"):
        return "failed", None
    if ending in ("retry", "raises"):
        return "retry_wait", None  # attempts left (10), no deadline
    if ending == "ambiguous":
        return "investigate", None
    if ending == "cancel_ignore":
        return "cancelled", _result(ending, _i(job))
    return "cancelled", latest  # stopped after the cancel: the latest progress


def _i(job: Job) -> int:
    i = json.loads(job.payload_json)["i"]
    assert isinstance(i, int)
    return i
