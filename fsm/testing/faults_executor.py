"""The `executor` fault model: restarts and hard cancels with results arriving late.

The thread executor registered as `thread` in the `jobfsm.executors` entry-point
group (the one workers use) runs attempts whose handlers block until the model
lets them finish. Hypothesis chooses a schedule of submits, restarts (a new
generation), hard cancels and completions, in any order; every handler is
finally released, so old-generation results always arrive, late.

- X1 every submitted attempt is settled exactly once (its result, or
  `abandoned` when a restart or a hard cancel left it behind);
- X2 no result of an attempt is delivered after a restart or a hard cancel
  abandoned it: a late completion of the old generation never reaches the new
  one, nor the new run (next fence) of the same job started meanwhile;
- X3 every attempt is settled within a bounded time once its handler returned.

The model needs no store; it runs the same against every store URL.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from ..ports import Attempt, Outcome
from ..records import Job
from ..registry import load_executor
from .faults_models import ModelRun

SLOTS = 3
#: bound on waiting for an attempt to be settled once its handler returned
SETTLE_WAIT = 5.0
OPS = ("submit", "submit", "finish", "finish", "restart", "cancel_hard", "rerun")

_schedule = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 15)), min_size=3, max_size=20)


def _job(n: int, fence: int = 1) -> Job:
    return Job(
        id=f"01EXECUTORMODEL{n:010d}",
        fence=fence,
        kind="executor-model",
        queue="executor-model",
        payload_json="{}",
        state="running",
        created_at=0.0,
        updated_at=0.0,
        run_after=0.0,
    )


def _key(job: Job) -> str:
    """One run: job id and fence (two runs of one job stay apart)."""
    return f"{job.id}#{job.fence}"


def _parse(key: str) -> tuple[int, int]:
    jid, fence = key.split("#")
    return int(jid.removeprefix("01EXECUTORMODEL")), int(fence)


class ExecutorModel:
    name: ClassVar[str] = "executor"
    about: ClassVar[str] = "executor restarts and hard cancels with late results"
    examples: ClassVar[dict[str, int]] = {"quick": 10, "default": 150, "thorough": 1500}

    def run(self, ctx: ModelRun) -> None:
        factory = load_executor("thread")

        # Thread timing decides some outcomes: the first failure is kept and raised
        # after hypothesis finishes, rather than replayed into a Flaky report.
        found: list[AssertionError] = []

        @ctx.settings(self.examples[ctx.size])
        @given(_schedule)
        def example(schedule: list[tuple[str, int]]) -> None:
            if found:
                return
            executor = factory(SLOTS)
            executor.start(SLOTS)
            try:
                _Schedule(ctx, executor).play(schedule)
            except AssertionError as err:
                found.append(err)
            finally:
                executor.shutdown(0.0)

        example()
        if found:
            raise found[0]


class _Schedule:
    def __init__(self, ctx: ModelRun, executor: Any) -> None:
        self.ctx = ctx
        self.executor = executor
        self.lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.returned: dict[str, threading.Event] = {}
        self.settled: dict[str, list[str]] = {}
        self.abandoned: set[str] = set()
        self.running: list[str] = []
        self.n = 0
        self.faults: Counter[str] = Counter()
        self.late: list[str] = []

    def _done(self, attempt: Attempt, outcome: Outcome) -> None:
        jid = _key(attempt.job)
        with self.lock:
            self.settled.setdefault(jid, []).append(outcome.status)
            if outcome.status == "succeeded" and jid in self.abandoned:
                self.late.append(jid)

    def _attempt(self, job: Job) -> Attempt:
        jid = _key(job)
        gate = self.gates[jid] = threading.Event()
        returned = self.returned[jid] = threading.Event()

        def run() -> Outcome:
            gate.wait(SETTLE_WAIT * 4)
            returned.set()
            return Outcome(status="succeeded", result_json='{"late": false}')

        return Attempt(
            job=job,
            timeout=3600.0,
            target="fsm.testing.faults_executor:none",
            run=run,
            cancelled=threading.Event(),
        )

    def play(self, schedule: list[tuple[str, int]]) -> None:
        for op, pick in schedule:
            self._op(op, pick)
        for gate in list(self.gates.values()):
            gate.set()  # every old handler finishes now: its result arrives late
        self._wait_settled()
        self.ctx.stats.faults.update(self.faults)
        self._check()

    def _op(self, op: str, pick: int) -> None:
        ex = self.executor
        if op == "submit":
            if ex.free <= 0:
                return
            self.n += 1
            self._submit(_job(self.n))
            self.faults["executor: attempt submitted"] += 1
        elif op == "rerun" and self.abandoned and ex.free > 0:
            # a new run (next fence) of a job whose old run was left behind, still running
            old = sorted(self.abandoned)[pick % len(self.abandoned)]
            number, fence = _parse(old)
            if _key(_job(number, fence + 1)) in self.gates:
                return
            self._submit(_job(number, fence + 1))
            self.faults["executor: new run of a job whose old run is still running"] += 1
        elif op == "finish" and self.running:
            jid = self.running.pop(pick % len(self.running))
            self.gates[jid].set()
            self.returned[jid].wait(SETTLE_WAIT)
        elif op == "restart":
            with self.lock:
                self.abandoned.update(self.running)
            ex.restart("executor model restart")
            self.running.clear()
            self.faults["executor: restart with attempts in flight"] += 1
        elif op == "cancel_hard" and self.running:
            jid = self.running.pop(pick % len(self.running))
            with self.lock:
                self.abandoned.add(jid)
            number, fence = _parse(jid)
            ex.cancel(_job(number).id, fence=fence, hard=True, reason="executor model hard cancel")
            self.faults["executor: hard cancel of a thread"] += 1

    def _submit(self, job: Job) -> None:
        self.executor.submit(self._attempt(job), self._done)
        self.running.append(_key(job))

    def _wait_settled(self) -> None:
        deadline = time.monotonic() + SETTLE_WAIT
        while time.monotonic() < deadline:
            with self.lock:
                pending = [j for j in self.gates if j not in self.settled]
                returned = all(e.is_set() for e in self.returned.values())
            if not pending and returned:
                time.sleep(0.01)  # a late callback, if any, lands now
                return
            time.sleep(0.005)

    def _check(self) -> None:
        checks = self.ctx.stats.checks
        with self.lock:
            settled = {k: list(v) for k, v in self.settled.items()}
            late = list(self.late)
        for jid in self.gates:
            got = settled.get(jid, [])
            if len(got) != 1:
                raise AssertionError(
                    f"X1 attempt {jid} (job#fence) was settled {len(got)} times: {got}"
                    if got
                    else f"X3 attempt of job {jid} was never settled ({SETTLE_WAIT}s after it "
                    "returned)"
                )
        checks["X1 every attempt settled exactly once"] += 1
        if late:
            raise AssertionError(
                f"X2 a late result of an abandoned attempt reached the worker: jobs {late}"
            )
        checks["X2 no late result after a restart or hard cancel"] += 1
