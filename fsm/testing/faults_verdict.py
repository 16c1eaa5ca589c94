"""The `verdicts` fault model: a death verdict overtaken before it is written.

The recovery sweep (`fsm.service.maintenance.sweep`) reads the leased jobs, judges their
owners with the production `fsm.service.identity.Identity.judge` over a simulated process
table, and expires the jobs of owners judged DEAD. Between its read and its
write, the world may move on. Here it does, every time: just after the sweep's
scan returns, a second sweeper (another worker on the same host, with its own
identity) judges the same dead owner and takes its jobs back, and a live worker
claims and starts them again. The first sweep then acts on what it read.

- V1 a verdict about the owner of the record as read is written only to that
  record (compare-and-set on the judged version): the live worker's new run is
  never expired, its fence and lease stay as they were;
- every trail replays to its record (`trail_problems`).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest, Store
from ..service import maintenance as recovery
from ..service.engine import Engine
from ..service.identity import Identity
from .faults_machine import suite_policy
from .faults_models import ModelRun
from .hosts import SimulatedProcesses

HOST = "verdict-sim"
KINDS = ("safe", "unsafe")

_example = st.lists(
    st.tuples(st.sampled_from(KINDS), st.booleans()),  # kind, started by the dead owner
    min_size=1,
    max_size=4,
)


class VerdictModel:
    name: ClassVar[str] = "verdicts"
    about: ClassVar[str] = "a death verdict overtaken by another sweeper and a new owner"
    examples: ClassVar[dict[str, int]] = {"quick": 8, "default": 60, "thorough": 600}

    def run(self, ctx: ModelRun) -> None:
        @ctx.settings(self.examples[ctx.size])
        @given(_example)
        def example(jobs: list[tuple[str, bool]]) -> None:
            with ctx.database() as opener:
                _Overtaken(ctx, opener(), opener()).play(jobs)

        example()


class _Overtaking:
    """The store, except that the sweep's first scan by owner host is overtaken: right
    after it reads, `overtake()` runs against the real store."""

    def __init__(self, inner: Store, overtake: Any) -> None:
        self._inner = inner
        self._overtake = overtake
        self.armed = False

    def scan(self, request: ScanRequest) -> list[Any]:
        found = self._inner.scan(request)
        if self.armed and request.owner_host is not None and request.lease_expired_at is None:
            self.armed = False
            self._overtake()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Overtaken:
    def __init__(self, ctx: ModelRun, store: Store, other: Store) -> None:
        self.ctx = ctx
        self.spec = lifecycle()
        self.clock = FakeClock()
        self.policy = suite_policy()
        self.queue = f"verdict-{uuid.uuid4().hex[:12]}"
        kinds = {
            k: KindPolicy(queue=self.queue, retry_safe=(k == "safe"), max_attempts=3) for k in KINDS
        }
        self.real = store
        self.proxy = _Overtaking(store, self._overtake)
        self.engine = Engine(self.proxy, clock=self.clock, policy=self.policy, kinds=kinds)
        self.other = Engine(other, clock=self.clock, policy=self.policy, kinds=kinds)
        self.processes = SimulatedProcesses()
        self.dead = self._identity(1)
        self.sweeper = self._identity(2)
        self.second = self._identity(3)
        self.newcomer = self._identity(4)
        self.ids: list[str] = []
        self.taken: dict[str, int] = {}

    def _identity(self, n: int) -> Identity:
        pid = 20_000 + n
        self.processes.start(pid)
        return Identity(HOST, pid=pid, processes=self.processes)

    def play(self, jobs: list[tuple[str, bool]]) -> None:
        owner = self.dead.owner
        for kind, started in jobs:
            job = self.other.submit(kind, {"n": len(self.ids)})
            self.ids.append(job.id)
            (leased,) = self.other.claim(owner, (self.queue,), limit=1, ids=[job.id])
            if started:
                self.other.start(job.id, leased.fence)
        self.processes.kill(owner.pid)
        self.ctx.stats.faults["verdicts: owner killed, verdict overtaken before its write"] += 1
        self.proxy.armed = True
        recovery.sweep(self.engine, self.sweeper)
        self._check()

    def _overtake(self) -> None:
        """Another sweeper takes the dead owner's jobs back; a live worker reclaims them."""
        recovery.sweep(self.other, self.second)
        me = self.newcomer.owner
        for job in self.other.claim(me, (self.queue,), limit=len(self.ids)):
            started = self.other.start(job.id, job.fence)
            self.taken[job.id] = started.fence
            self.ctx.stats.faults["verdicts: job reclaimed by a live worker meanwhile"] += 1

    def _check(self) -> None:
        me = self.newcomer.owner
        for jid, fence in self.taken.items():
            job = self.real.get(jid)
            assert job is not None
            if job.state != "running" or job.fence != fence or job.owner != me:
                raise AssertionError(
                    f"V1 job {jid}: a death verdict on its former owner took the live run of "
                    f"{me} (fence {fence}); the job is now {job.state}, fence {job.fence}, "
                    f"owner {job.owner}"
                )
        self.ctx.stats.checks["V1 a death verdict is written only to the record judged"] += 1
        for jid in self.ids:
            job = self.real.get(jid)
            assert job is not None
            history = self.real.history(jid)
            problems = trail_problems(job, history, self.spec, self.policy)
            if problems:
                raise AssertionError("; ".join(problems))
            self.ctx.coverage.trail(history)
        self.ctx.stats.checks["I2/I4/I5/I6/I8 audit trail and replay"] += 1
