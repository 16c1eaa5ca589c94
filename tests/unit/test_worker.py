"""The worker loop on the memory store, with real threads (fsm.worker)."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.executors import ThreadExecutor
from adapters.memory import MemoryStore
from adapters.polling import PollingDelivery
from fsm import (
    Backoff,
    CountingMetrics,
    Engine,
    LeasePolicy,
    Limits,
    Policy,
    RecoveryPolicy,
    RetryPolicy,
)
from fsm.errors import Ambiguous, Permanent, Retry, TransientStoreError
from fsm.lifecycle.core import decide
from fsm.ports import ClaimRequest
from fsm.records import Job, Owner, new_id
from fsm.registry import open_store
from fsm.service import maintenance as recovery_module
from fsm.service.identity import Identity
from fsm.worker import Worker
from fsm.worker.context import Context


def _engine(store: Any = None, *, ttl: float = 2.0, hb: float = 0.2, grace: float = 5.0) -> Engine:
    return Engine(
        store or MemoryStore(),
        policy=Policy(
            lease=LeasePolicy(ttl=ttl, heartbeat_interval=hb),
            recovery=RecoveryPolicy(sweep_interval=0.2),
            limits=Limits(shutdown_grace=grace),
        ),
        metrics=CountingMetrics(),
    )


def _worker(engine: Engine, **kw: Any) -> Worker:
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("install_signals", False)
    kw.setdefault("identity", Identity())
    return Worker(engine, **kw)


def wait_for(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if check():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def running() -> Iterator[Callable[[Worker], Worker]]:
    """Start workers on threads; every one is stopped (at once) and joined after the test."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(worker: Worker) -> Worker:
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        assert worker.wait_started(5.0)
        started.append((worker, t))
        return worker

    yield start
    for worker, t in started:
        worker.stop(now=True)
        t.join(10.0)
        assert not t.is_alive(), "worker did not stop"


def _state(engine: Engine, job: Job) -> str:
    return engine.get(job.id).state


def test_handler_outcomes_map_to_reports(running: Callable[[Worker], Worker]) -> None:
    engine = _engine()
    worker = _worker(engine)

    @worker.handler("ok")
    def ok(ctx: Context) -> Any:
        return {"double": ctx.payload * 2, "attempt": ctx.attempt, "fence": ctx.fence}

    @worker.handler("retry", max_attempts=3)
    def retry(ctx: Context) -> Any:
        raise Retry(after=3600)

    @worker.handler("boom", max_attempts=1)
    def boom(ctx: Context) -> Any:
        raise RuntimeError("kaboom")

    @worker.handler("perm")
    def perm(ctx: Context) -> Any:
        raise Permanent("bad address")

    @worker.handler("amb")
    def amb(ctx: Context) -> Any:
        raise Ambiguous("charge may have gone through")

    @worker.handler("notjson")
    def notjson(ctx: Context) -> Any:
        return {1, 2}

    jobs = {k: engine.submit(k, 21) for k in ("ok", "retry", "boom", "perm", "amb", "notjson")}
    running(worker)

    final = {"succeeded", "retry_wait", "failed", "investigate"}
    wait_for(lambda: all(_state(engine, j) in final for j in jobs.values()), what="outcomes")
    got = {k: engine.get(j.id) for k, j in jobs.items()}
    assert got["ok"].state == "succeeded"
    assert got["ok"].result == {"double": 42, "attempt": 1, "fence": 1}
    assert got["retry"].state == "retry_wait"
    assert got["retry"].run_after >= time.time() + 3500  # Retry(after=) wins over backoff
    assert got["boom"].state == "failed"
    assert "kaboom" in (got["boom"].last_error or "")
    assert got["perm"].state == "failed"
    assert got["perm"].attempt == 1  # permanent: no second attempt
    assert got["amb"].state == "investigate"
    assert got["notjson"].state == "failed"
    assert "not JSON" in (got["notjson"].last_error or "")
    metrics = engine.metrics
    assert isinstance(metrics, CountingMetrics)
    assert metrics.attempts[("ok", "succeeded")] == 1


def test_a_kind_without_a_handler_here_waits_for_a_worker_that_has_one(
    running: Callable[[Worker], Worker],
) -> None:
    # given an old worker that does not know the kind "mystery" (a rolling deploy)
    engine = _engine()
    old = _worker(engine, handlers={"known": lambda ctx: None})
    job = engine.submit("mystery", {}, max_attempts=10)
    known = engine.submit("known", {})
    running(old)
    # then it runs what it knows and leaves the new kind queued, untouched
    wait_for(lambda: _state(engine, known) == "succeeded", what="the known job")
    time.sleep(0.3)
    waiting = engine.get(job.id)
    assert (waiting.state, waiting.attempt, waiting.fence) == ("queued", 0, 0)
    # when a worker that has the handler comes up, it runs the job
    running(_worker(engine, handlers={"mystery": lambda ctx: "solved"}))
    wait_for(lambda: _state(engine, job) == "succeeded", what="the new worker to run it")
    assert engine.get(job.id).result == "solved"


def test_registering_a_handler_sets_the_kind_defaults_for_submit() -> None:
    engine = _engine()
    worker = _worker(engine)

    @worker.handler("email", retry_safe=False, timeout=12, max_attempts=4, queue="mail")
    def send(ctx: Context) -> None:
        return None

    job = engine.submit("email", {})

    assert (job.retry_safe, job.timeout, job.max_attempts, job.queue) == (False, 12, 4, "mail")


def test_heartbeats_keep_a_job_longer_than_its_lease(running: Callable[[Worker], Worker]) -> None:
    engine = _engine(ttl=1.0, hb=0.2)
    release = threading.Event()
    worker = _worker(engine, handlers={"slow": lambda ctx: release.wait(10)})
    job = engine.submit("slow")
    running(worker)

    wait_for(lambda: _state(engine, job) == "running", what="start")
    time.sleep(2.5)  # 2.5 TTLs: only renewals keep it
    still = engine.get(job.id)
    release.set()

    assert still.state == "running"
    assert still.fence == 1
    wait_for(lambda: _state(engine, job) == "succeeded", what="success")
    assert [e.event for e in engine.history(job.id)].count("expire") == 0


def test_a_lost_lease_stops_the_handler_and_discards_its_result(
    running: Callable[[Worker], Worker],
) -> None:
    engine = _engine(ttl=1.0, hb=0.2)
    seen: dict[str, Any] = {}
    go_on = threading.Event()

    def handler(ctx: Context) -> str:
        seen["ctx"] = ctx
        go_on.wait(10)
        return "stale"

    worker = _worker(engine, handlers={"k": handler})
    job = engine.submit("k")
    running(worker)
    wait_for(lambda: "ctx" in seen, what="start")

    # Another owner takes over (as recovery would after the lease lapsed).
    engine.expire(job.id, verdict="dead", reason="test: owner judged dead")
    thief = Identity().owner
    (taken,) = engine.claim(thief, limit=1)
    engine.start(taken.id, taken.fence)
    wait_for(seen["ctx"].lease_lost.is_set, what="lease loss noticed")
    go_on.set()
    time.sleep(0.5)

    ctx = seen["ctx"]
    assert ctx.cancelled.is_set()
    now = engine.get(job.id)
    assert now.state == "running"
    assert now.owner == thief
    assert now.result is None
    assert job.id not in worker.running


def test_a_stale_report_is_rejected_audited_and_never_retried(
    running: Callable[[Worker], Worker],
) -> None:
    # Heartbeats too slow to notice the takeover, so the late report reaches the engine.
    engine = _engine(ttl=30.0, hb=10.0)
    go_on = threading.Event()
    started = threading.Event()

    def handler(ctx: Context) -> str:
        started.set()
        go_on.wait(10)
        return "late"

    worker = _worker(engine, handlers={"k": handler})
    job = engine.submit("k")
    running(worker)
    assert started.wait(5)

    engine.expire(job.id, verdict="dead", reason="test")
    (taken,) = engine.claim(Identity().owner, limit=1)
    go_on.set()

    wait_for(lambda: job.id not in worker.running, what="report handled")
    trail = engine.history(job.id)
    rejected = [e for e in trail if e.outcome == "rejected"]
    assert [(e.event, e.fence) for e in rejected] == [("succeed", 1)]
    assert engine.get(job.id).state == "leased"
    assert engine.get(job.id).fence == taken.fence
    time.sleep(0.3)
    assert len([e for e in engine.history(job.id) if e.outcome == "rejected"]) == 1


def test_a_cancel_is_seen_at_the_next_heartbeat_and_acknowledged_with_progress(
    running: Callable[[Worker], Worker],
) -> None:
    engine = _engine(ttl=1.0, hb=0.1)

    def handler(ctx: Context) -> None:
        for i in range(1000):
            ctx.progress(done=i)
            ctx.check_cancelled()
            time.sleep(0.01)

    worker = _worker(engine, handlers={"long": handler})
    job = engine.submit("long")
    running(worker)
    wait_for(lambda: _state(engine, job) == "running", what="start")

    engine.cancel(job.id, actor="ops", reason="not needed")

    wait_for(lambda: _state(engine, job) == "cancelled", what="cancelled_ack")
    done = engine.get(job.id)
    assert [e.event for e in engine.history(job.id)][-2:] == ["cancel", "cancelled_ack"]
    assert isinstance(done.result, dict)
    assert 0 < done.result["done"] < 999


def test_a_job_its_own_process_no_longer_holds_is_recovered_by_the_sweep() -> None:
    engine = _engine(ttl=60.0)
    identity = Identity()
    worker = _worker(engine, identity=identity)
    job = engine.submit("k", retry_safe=True)
    # A claim that committed but whose reply was lost: owned by us, never registered.
    (leased,) = engine.claim(identity.owner, limit=1)
    engine.start(leased.id, leased.fence)

    report = worker.sweep()

    recovered = engine.get(job.id)
    assert report.expired == 1
    assert recovered.state == "retry_wait"
    assert recovered.recoveries == 1
    assert "no longer holds" in (recovered.last_error or "")


def test_the_sweep_leaves_jobs_of_live_unknown_owners_to_their_lease() -> None:
    engine = _engine(ttl=60.0)
    worker = _worker(engine)
    job = engine.submit("k")
    (_leased,) = engine.claim(Identity(host="another-host").owner, limit=1)

    report = worker.sweep()

    assert report.expired == 0
    assert engine.get(job.id).state == "leased"


class FlakyStore(MemoryStore):
    """A memory store whose claims fail while `down` is set (a store outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = threading.Event()
        self.claims_failed = 0

    def claim(self, request: ClaimRequest) -> list[Job]:
        if self.down.is_set():
            self.claims_failed += 1
            raise TransientStoreError("store unreachable (test)")
        return super().claim(request)


def test_the_worker_is_not_ready_while_the_store_is_down_and_recovers(
    running: Callable[[Worker], Worker],
) -> None:
    store = FlakyStore()
    engine = _engine(store)
    worker = _worker(engine, handlers={"k": lambda ctx: "ok"})
    running(worker)
    wait_for(lambda: worker.ready, what="ready")

    store.down.set()
    wait_for(lambda: not worker.ready, what="not ready")
    failed_before = store.claims_failed
    time.sleep(0.5)
    assert store.claims_failed - failed_before < 30  # backed off, not a hot loop
    job = engine.submit("k")
    store.down.clear()

    wait_for(lambda: worker.ready, what="ready again")
    wait_for(lambda: _state(engine, job) == "succeeded", what="job after outage")


class SilentDelivery:
    """A push delivery with nothing to deliver (an idle RabbitMQ queue)."""

    ready = True

    def start(self, queues: Any) -> None:
        """Nothing to subscribe to."""

    def poll(self, capacity: int, timeout: float) -> list[Any]:
        time.sleep(min(timeout, 0.05))
        return []

    def settle(self, wakeup: Any, claimed: bool = False) -> None:
        """Nothing was delivered."""

    def check(self) -> None:
        """Never fails."""

    def publish(self, jobs: Any) -> None:
        """Drops the hints: the store stays the truth."""

    def close(self) -> None:
        """Nothing to close."""


def test_an_idle_worker_is_ready_before_its_first_job(
    running: Callable[[Worker], Worker],
) -> None:
    # given a worker whose delivery never wakes it (no claim is ever made)
    worker = _worker(_engine(), handlers={"k": lambda ctx: "ok"}, delivery=SilentDelivery())
    # when it has started and swept the store
    running(worker)
    # then it reports ready, and keeps doing so across sweeps
    wait_for(lambda: worker.ready, what="ready while idle")
    time.sleep(0.5)
    assert worker.ready


def test_a_local_submit_wakes_a_polling_worker_at_once(
    running: Callable[[Worker], Worker],
) -> None:
    engine = _engine()
    delivery = PollingDelivery(engine.store, poll_interval=30.0)
    engine.publisher = delivery
    done = threading.Event()
    worker = _worker(engine, delivery=delivery, handlers={"k": lambda ctx: done.set()})
    running(worker)
    time.sleep(0.2)  # the worker is now in a 30 s poll

    engine.submit("k")

    assert done.wait(2.0)


def test_stop_drains_running_jobs_and_leaves_no_lease(
    running: Callable[[Worker], Worker],
) -> None:
    engine = _engine(grace=10.0)
    worker = _worker(engine, concurrency=4, handlers={"k": lambda ctx: time.sleep(0.3)})
    jobs = [engine.submit("k") for _ in range(12)]
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    wait_for(lambda: any(_state(engine, j) == "running" for j in jobs), what="start")

    worker.stop()
    t.join(10.0)

    states = [_state(engine, j) for j in jobs]
    assert not t.is_alive()
    assert set(states) <= {"succeeded", "queued"}
    assert "succeeded" in states
    assert all(engine.get(j.id).owner is None for j in jobs)


def test_jobs_a_claim_started_as_the_worker_stopped_run_within_the_drain() -> None:
    # given a worker whose first claim-and-start returns just after stop() was called
    class StopInClaim(MemoryStore):
        worker: Worker | None = None

        def claim(self, request: ClaimRequest) -> list[Job]:
            got = super().claim(request)
            if got and self.worker is not None:
                self.worker.stop()
                self.worker = None
            return got

    store = StopInClaim()
    engine = _engine(store, grace=10.0)
    worker = _worker(engine, concurrency=4, handlers={"k": lambda ctx: time.sleep(0.05)})
    store.worker = worker
    jobs = [engine.submit("k") for _ in range(8)]

    # when it runs until that stop has drained
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    t.join(10.0)

    # then what that claim started ran to its end; nothing is left running or held
    states = [_state(engine, j) for j in jobs]
    assert not t.is_alive()
    assert set(states) <= {"succeeded", "queued"}
    assert states.count("succeeded") == 4  # the one claim's batch: its 4 free slots
    assert all(engine.get(j.id).owner is None for j in jobs)


def test_the_next_claim_runs_while_reports_are_written_and_held_leases_stay_bounded() -> None:
    # given a store whose report writes wait at a gate, and a worker with 2 slots
    class GatedReports(MemoryStore):
        gate = threading.Event()

        def apply(self, decisions: Any) -> Any:
            if any(d.entry is not None and d.entry.event == "succeed" for d in decisions):
                self.gate.wait(10.0)
            return super().apply(decisions)

    store = GatedReports()
    engine = _engine(store, ttl=30.0)
    lock = threading.Lock()
    ran: list[str] = []
    running = [0, 0]  # now, most at once

    def handler(ctx: Context) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running)
            ran.append(ctx.job.id)
        time.sleep(0.01)
        with lock:
            running[0] -= 1

    worker = _worker(engine, concurrency=2, handlers={"k": handler})
    jobs = [engine.submit("k") for _ in range(8)]
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        # when the first reports wait at the gate, the freed slots run the next jobs...
        wait_for(lambda: len(ran) == 4, what="a second slot's worth of jobs to run")
        time.sleep(0.3)
        # ...up to 2 x concurrency held leases: 2 reporting, 2 run and waiting to report
        assert len(ran) == 4
        assert running[1] <= 2  # never more handlers at once than slots
        held = [j for j in jobs if engine.get(j.id).owner is not None]
        assert len(held) == 4
    finally:
        store.gate.set()
    # then once the reports go through every job succeeds
    wait_for(lambda: all(_state(engine, j) == "succeeded" for j in jobs), what="all succeeded")
    worker.stop()
    t.join(10.0)
    assert sorted(ran) == sorted(j.id for j in jobs)


def test_stop_now_hard_cancels_and_expires_running_jobs_with_the_reason() -> None:
    engine = _engine(ttl=60.0, grace=30.0)
    hold = threading.Event()
    worker = _worker(engine, handlers={"k": lambda ctx: hold.wait(10)})
    job = engine.submit("k", retry_safe=False)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    wait_for(lambda: _state(engine, job) == "running", what="start")

    began = time.monotonic()
    worker.stop(now=True)
    t.join(10.0)
    hold.set()

    assert time.monotonic() - began < 5.0
    given_up = engine.get(job.id)
    assert given_up.state == "investigate"  # not retry-safe: an operator decides
    assert given_up.last_error == "worker stopped at once"
    assert [e.event for e in engine.history(job.id)][-1] == "expire"


def test_thread_executor_abandons_an_attempt_past_its_timeout_to_recovery(
    running: Callable[[Worker], Worker],
) -> None:
    engine = _engine(ttl=60.0)
    hold = threading.Event()
    worker = _worker(
        engine,
        executor=ThreadExecutor(stop_grace=0.2),
        handlers={"stuck": lambda ctx: hold.wait(20)},
    )
    job = engine.submit("stuck", timeout=0.3, retry_safe=False)
    running(worker)

    wait_for(lambda: _state(engine, job) == "investigate", what="recovery", timeout=6.0)
    hold.set()
    parked = engine.get(job.id)
    assert "abandoned" in (parked.last_error or "")
    assert parked.recoveries == 1


def test_the_sweep_fails_jobs_past_their_deadline() -> None:
    engine = _engine(ttl=60.0)
    worker = _worker(engine)
    waiting = engine.submit("k", deadline=time.time() + 0.2)
    running_job = engine.submit("k", deadline=time.time() + 0.2)
    (leased,) = engine.claim(Identity(host="elsewhere").owner, limit=1, ids=[running_job.id])
    engine.start(leased.id, leased.fence)
    time.sleep(0.3)

    report = worker.sweep()

    assert report.deadlines == 2
    for job in (waiting, running_job):
        failed = engine.get(job.id)
        assert failed.state == "failed"
        assert "deadline passed" in (failed.last_error or "")


def test_the_sweep_recovers_local_deaths_even_past_its_scan_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recovery_module, "SWEEP_LIMIT", 2)
    engine = _engine(ttl=60.0)
    worker = _worker(engine)
    elsewhere = Identity(host="elsewhere").owner
    for _ in range(3):  # leased by a live owner on another host: first in any scan
        engine.submit("k")
        engine.claim(elsewhere, limit=1)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead_here = Owner(host=worker.identity.host, pid=proc.pid, incarnation="gone")
    job = engine.submit("k")
    engine.claim(dead_here, limit=1)

    report = worker.sweep()

    assert report.expired == 1
    assert engine.get(job.id).state == "queued"


def test_a_late_old_run_never_makes_the_sweep_expire_the_new_run_of_the_same_job(
    running: Callable[[Worker], Worker],
) -> None:
    # given a job whose first run hangs (ignoring its cancel token) after its lease was
    # taken back, while this same worker has leased it again and runs it under fence 2
    engine = Engine(
        MemoryStore(),
        policy=Policy(
            retry=RetryPolicy(backoff=Backoff(base=0.01, cap=0.01)),
            lease=LeasePolicy(ttl=60.0, heartbeat_interval=0.05),
            recovery=RecoveryPolicy(sweep_interval=3600.0),  # sweeps only when the test says
        ),
    )
    old_may_end = threading.Event()
    new_started = threading.Event()
    new_may_end = threading.Event()

    def handler(ctx: Context) -> str:
        if ctx.fence == 1:
            old_may_end.wait(10)  # uncooperative: the executor has to abandon it
            return "old"
        new_started.set()
        new_may_end.wait(10)
        return "new"

    worker = _worker(
        engine,
        handlers={"k": handler},
        concurrency=2,
        executor=ThreadExecutor(stop_grace=0.2),
    )
    job = engine.submit("k")
    running(worker)
    wait_for(lambda: engine.get(job.id).state == "running", what="the first run")
    engine.expire(job.id, verdict="dead", reason="test: taken back")
    assert new_started.wait(5), "the worker never ran the job again"
    assert engine.get(job.id).fence == 2
    time.sleep(0.5)  # the old run is abandoned by the executor (stop grace 0.2 s)
    # when the old run finally ends, and a recovery sweep runs
    old_may_end.set()
    time.sleep(0.3)
    report = worker.sweep()
    # then the new run is still this worker's: not expired, no extra recovery
    after = engine.get(job.id)
    assert report.expired == 0
    assert (after.state, after.fence, after.recoveries) == ("running", 2, 1)
    new_may_end.set()
    wait_for(lambda: engine.get(job.id).state == "succeeded", what="the new run's success")
    assert engine.get(job.id).result == "new"


def test_a_payload_that_cannot_be_decoded_fails_its_job_alone_and_the_worker_goes_on(
    running: Callable[[Worker], Worker],
) -> None:
    # given a job whose stored payload nests ~1000 deep (written by another submitter,
    # past the submit check) between two ordinary jobs of the same claim batch
    engine = _engine()
    seen: list[Any] = []
    worker = _worker(engine, handlers={"k": lambda ctx: seen.append(ctx.payload) or "ok"})
    first = engine.submit("k", 1)
    hostile = decide(
        None,
        "submit",
        time.time(),
        engine.policy,
        id=new_id(),
        kind="k",
        payload_json="[" * 990 + "]" * 990,
        retry_safe=True,
    )
    engine.store.insert([hostile])
    last = engine.submit("k", 2)
    # when the worker runs them
    running(worker)
    wait_for(lambda: engine.get(last.id).state == "succeeded", what="the batch")
    # then the hostile job failed alone, named, and the worker still works
    bad = engine.get(hostile.job.id)
    assert bad.state == "failed"
    assert "deeper than" in (bad.last_error or "")
    assert engine.get(first.id).state == "succeeded"
    assert sorted(seen) == [1, 2]
    assert worker.ready
    after = engine.submit("k", 3)
    wait_for(lambda: engine.get(after.id).state == "succeeded", what="a job after it")


def test_one_bad_report_fails_alone_and_good_jobs_run_once(
    running: Callable[[Worker], Worker], tmp_path: Any
) -> None:
    # given handlers whose outcomes the store could once not take: an error text with
    # a lone surrogate, and Retry(after=nan), in the same batch as good jobs
    engine = _engine(open_store(f"sqlite:///{tmp_path / 'jobs.db'}"))

    def handler(ctx: Context) -> str:
        if ctx.payload == "surrogate":
            raise RuntimeError("bad \udcff text")
        if ctx.payload == "nan":
            raise Retry(after=math.nan)
        return "ok"

    worker = _worker(engine, handlers={"k": handler}, concurrency=4)
    jobs = {p: engine.submit("k", p, max_attempts=2) for p in ("a", "surrogate", "nan", "b")}
    # when they run and are reported together
    running(worker)
    wait_for(
        lambda: all(
            engine.get(j.id).attempt >= 1 and j.id not in worker.running for j in jobs.values()
        ),
        what="every job reported",
    )
    # then each bad report was stored on its own job, cleaned or defaulted
    surrogate = engine.get(jobs["surrogate"].id)
    assert surrogate.last_error is not None
    assert "\\udcff" in surrogate.last_error
    nan = engine.get(jobs["nan"].id)
    assert nan.state in ("retry_wait", "leased", "running", "failed")
    assert math.isfinite(nan.run_after)
    for good in ("a", "b"):
        job = engine.get(jobs[good].id)
        assert (job.state, job.attempt) == ("succeeded", 1)
    engine.store.close()


def test_an_unexpected_error_is_stored_as_one_line_with_its_traceback_in_the_audit(
    running: Callable[[Worker], Worker],
) -> None:
    # given handlers raising an unexpected error and an expected (Permanent) one
    engine = _engine()

    def boom(ctx: Context) -> None:
        raise ValueError("missing row\nsecond line of the message")

    def refuse(ctx: Context) -> None:
        raise Permanent("card declined")

    worker = _worker(engine, handlers={"boom": boom, "refuse": refuse})
    crashed = engine.submit("boom", max_attempts=1)
    declined = engine.submit("refuse")
    running(worker)
    wait_for(lambda: _state(engine, crashed) == _state(engine, declined) == "failed", what="fail")
    # then the record keeps a one-line summary; the traceback is in the fail entry only
    assert engine.get(crashed.id).last_error == "ValueError: missing row"
    fail = next(e for e in engine.history(crashed.id) if e.event == "fail")
    assert "raise ValueError" in fail.data["traceback"]
    assert engine.get(declined.id).last_error == "Permanent: card declined"
    refused = next(e for e in engine.history(declined.id) if e.event == "fail")
    assert "traceback" not in refused.data  # an expected outcome carries none


def test_heartbeats_failing_lose_every_lease_before_it_can_lapse(
    running: Callable[[Worker], Worker],
) -> None:
    # given a running job, and then a store whose renewals all fail
    class RenewFails(MemoryStore):
        failing = False

        def renew(self, request: Any) -> dict[str, str]:
            if self.failing:
                raise TransientStoreError("store unreachable (test)")
            return super().renew(request)

    store = RenewFails()
    engine = _engine(store, ttl=1.0, hb=0.2)
    seen: dict[str, Context] = {}
    release = threading.Event()

    def handler(ctx: Context) -> None:
        seen["ctx"] = ctx
        release.wait(10)

    worker = _worker(engine, handlers={"k": handler})
    job = engine.submit("k")
    running(worker)
    wait_for(lambda: "ctx" in seen, what="the handler to start")
    renewed_until = engine.get(job.id).lease_until
    assert renewed_until is not None
    store.failing = True
    # when heartbeats keep failing, the handler is told its lease is lost, and the
    # worker gives up before the lease lapses at the store
    wait_for(seen["ctx"].lease_lost.is_set, timeout=5.0, what="the lease to be given up")
    lost_at = time.time()
    release.set()
    last = engine.get(job.id).lease_until
    assert last is not None
    assert lost_at < last, f"given up {lost_at - last:.2f}s after the lease lapsed"


def test_an_async_handler_on_a_thread_executor_runs_on_a_loop_of_its_own(
    running: Callable[[Worker], Worker],
) -> None:
    # given an async def handler and a sync one on a plain thread executor
    async def doubled(ctx: Context) -> int:
        return int(ctx.payload["n"]) * 2

    engine = _engine(ttl=60.0)
    worker = _worker(
        engine,
        executor=ThreadExecutor(stop_grace=0.2),
        handlers={"async": doubled, "sync": lambda ctx: "plain"},
    )
    async_job = engine.submit("async", {"n": 21})
    sync_job = engine.submit("sync")
    # when the worker runs them
    running(worker)
    wait_for(lambda: _state(engine, async_job) == "succeeded", what="async job")
    wait_for(lambda: _state(engine, sync_job) == "succeeded", what="sync job")
    # then the coroutine was awaited (its result stored), not returned as an object
    assert engine.get(async_job.id).result_json == "42"
    assert engine.get(sync_job.id).result_json == '"plain"'


def test_a_run_token_behaves_as_a_threading_event() -> None:
    from fsm.worker.runs import Token

    token = Token()
    assert isinstance(token, threading.Event)
    assert not token.is_set()
    assert token.wait(0.01) is False  # times out unset
    waiter_saw: list[bool] = []
    waiter = threading.Thread(target=lambda: waiter_saw.append(token.wait(10)))
    waiter.start()
    time.sleep(0.05)
    token.set()
    waiter.join(5)
    assert waiter_saw == [True]
    assert token.is_set()
    assert token.wait(0) is True
    token.clear()
    assert not token.is_set()
