"""The `races` fault model: decisions read before a concurrent write, and the sweep.

Each example opens a fresh database with two handles (as two processes would
hold), submits a few jobs, leases them, starts some, and asks an operator to
cancel some running ones. Then, per round:

- decisions are read and decided on the records as they are now (expire on a
  lapsed lease or a dead verdict, deadline, a worker's fail or succeed, an
  operator cancel);
- before they are written, the owner's heartbeat renews some leases, or an
  operator cancels some jobs, through the other handle;
- the decisions are written, one by one or in one batched `apply`.

R1: every decision whose job was renewed or changed in between loses its
compare-and-set (a renewal bumps the version, so a decision read before it
cannot overwrite it); R2: every decision whose job nobody touched is applied.
At the end of the example the clock passes every deadline and lease and one
sweep runs: R3 every job past its deadline is failed, leased and running ones
included; R4 no lapsed lease survives the sweep. Every trail is checked by
`trail_problems` after every round.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from hypothesis import example, given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import JobFSMError, VersionConflict
from ..inputs import KindPolicy
from ..lifecycle.core import decide
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest, Store
from ..records import Decision, Job, Owner
from ..service import maintenance as recovery
from ..service.engine import Engine
from .faults_machine import suite_policy
from .faults_models import ModelRun

OWNER = Owner(host="race-sim", pid=2, incarnation="race-incarnation-a")
KINDS = ("safe", "unsafe")
EVENTS = ("expire", "expire_dead", "deadline", "fail", "succeed", "cancel")

_round = st.fixed_dictionaries(
    {
        "advance": st.sampled_from((0.0, 6.0, 31.0)),
        "event": st.sampled_from(EVENTS),
        "writer": st.sampled_from(("renew", "cancel", "none")),
        "touch": st.lists(st.booleans(), min_size=4, max_size=4),
        "batched": st.booleans(),
    }
)

_example = st.fixed_dictionaries(
    {
        "jobs": st.lists(
            st.tuples(
                st.sampled_from(KINDS),
                st.sampled_from((None, 20.0, 45.0)),  # deadline
                st.sampled_from(("queued", "leased", "running", "cancelling")),
            ),
            min_size=1,
            max_size=4,
        ),
        "rounds": st.lists(_round, min_size=1, max_size=4),
    }
)


#: checked first at every size: a running job of each kind, no deadline, and a round
#: that decides nothing (a deadline event on jobs without one): both are still running
#: when the lease lapses, and the sweep, which has no reconciler, must take both back
#: at once (R4); the drawn plans often finish or cancel the running jobs first
LAPSED_RUNS: dict[str, Any] = {
    "jobs": [("safe", None, "running"), ("unsafe", None, "running")],
    "rounds": [
        {
            "advance": 0.0,
            "event": "deadline",
            "writer": "none",
            "touch": [False] * 4,
            "batched": False,
        }
    ],
}


class RaceModel:
    name: ClassVar[str] = "races"
    about: ClassVar[str] = "decisions read before a renewal or operator write; the sweep"
    examples: ClassVar[dict[str, int]] = {"quick": 10, "default": 120, "thorough": 1200}

    def run(self, ctx: ModelRun) -> None:
        @ctx.settings(self.examples[ctx.size])
        @given(_example)
        @example(LAPSED_RUNS)
        def one(plan: dict[str, Any]) -> None:
            with ctx.database() as opener:
                _Race(ctx, opener(), opener()).play(plan)

        one()


class _Race:
    def __init__(self, ctx: ModelRun, store: Store, other: Store) -> None:
        self.ctx = ctx
        self.spec = lifecycle()
        self.clock = FakeClock()
        self.policy = suite_policy()
        self.queue = f"race-{uuid.uuid4().hex[:12]}"
        kinds = {
            k: KindPolicy(queue=self.queue, retry_safe=(k == "safe"), max_attempts=3) for k in KINDS
        }
        self.store = store
        self.engine = Engine(store, clock=self.clock, policy=self.policy, kinds=kinds)
        self.other = Engine(other, clock=self.clock, policy=self.policy, kinds=kinds)
        self.ids: list[str] = []
        self.deadline_states = frozenset(self.spec.sources("deadline"))

    def _fail(self, text: str) -> None:
        raise AssertionError(text)

    def _count(self, name: str) -> None:
        self.ctx.stats.checks[name] += 1

    def _read(self) -> list[Job]:
        """The example's jobs as stored, in the order they were submitted: one scan of
        its queue (the example's own), not one `get` each."""
        listed = self.engine.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        by_id = {j.id: j for j in listed}
        lost = [jid for jid in self.ids if jid not in by_id]
        if lost:
            self._fail(f"I3 jobs {lost} are no longer stored")
        return [by_id[jid] for jid in self.ids]

    def play(self, plan: dict[str, Any]) -> None:
        for kind, deadline, target in plan["jobs"]:
            self._setup(kind, deadline, target)
        self._check()
        for rnd in plan["rounds"]:
            self._round(rnd)
            self._check()
        # one job in each state the deadline event leaves, all due to fail together
        for target in ("queued", "leased", "running", "cancelling"):
            self._setup(KINDS[0], 5.0, target)
        self._sweep()
        self._check(final=True)

    def _setup(self, kind: str, deadline: float | None, target: str) -> None:
        """Submit a job and bring it to `target` (queued, leased, running, cancelling)."""
        opts: dict[str, Any] = {}
        if deadline is not None:
            opts["deadline"] = self.clock.now() + deadline
        job = self.engine.submit(kind, {"race": len(self.ids)}, **opts)
        self.ids.append(job.id)
        if target == "queued":
            return
        (leased,) = self.engine.claim(OWNER, (self.queue,), limit=1, ids=[job.id])
        if target in ("running", "cancelling"):
            self.engine.start(job.id, leased.fence)
        if target == "cancelling":
            self.other.cancel(job.id, actor="operator", reason="race model")

    def _decision(self, job: Job, event: str, now: float) -> Decision | None:
        args: dict[str, Any] = {}
        if event == "expire_dead":
            event, args = "expire", {"verdict": "dead", "reason": "pid gone"}
        elif event in ("fail", "succeed"):
            args = {"fence": job.fence}
            if event == "fail":
                args["error"] = "handler raised"
        elif event == "cancel":
            args = {"actor": "operator", "reason": "race model"}
        try:
            return decide(job, event, now, self.policy, spec=self.spec, **args)
        except JobFSMError:
            return None

    def _round(self, rnd: dict[str, Any]) -> None:
        now = self.clock.advance(rnd["advance"])
        read = self._read()
        decisions = [d for d in (self._decision(j, rnd["event"], now) for j in read) if d]
        if not decisions:
            return
        touched = self._interfere(rnd["writer"], [d.job.id for d in decisions], rnd["touch"])
        if rnd["batched"] and len(decisions) > 1:
            self.ctx.stats.faults["races: batched apply of stale and fresh decisions"] += 1
            outcomes = self.store.apply(decisions)
        else:
            outcomes = [self.store.apply([d])[0] for d in decisions]
        for d, out in zip(decisions, outcomes, strict=True):
            what = f"{d.event} of job {d.job.id} decided on version {d.job.version - 1}"
            if d.job.id in touched:
                self._count("R1 a decision read before a concurrent write is refused")
                if not isinstance(out, VersionConflict):
                    self._fail(
                        f"R1 {what}: a concurrent {touched[d.job.id]} changed the job after "
                        "the decision was read, yet the stale decision was written"
                    )
            else:
                self._count("R2 an unraced decision is applied")
                if isinstance(out, VersionConflict):
                    self._fail(f"R2 {what}: nobody changed the job, yet the write conflicted")

    def _interfere(self, writer: str, ids: list[str], touch: list[bool]) -> dict[str, str]:
        chosen = [jid for i, jid in enumerate(ids) if touch[i % len(touch)]]
        if writer == "none" or not chosen:
            return {}
        stats = self.ctx.stats.faults
        if writer == "renew":
            held: dict[str, int] = {}
            for jid in chosen:
                job = self.other.get(jid)
                if job.owner == OWNER and job.state in ("leased", "running", "cancelling"):
                    held[jid] = job.fence
            renewed = self.other.heartbeat(OWNER, held)
            for state in renewed.values():
                self.ctx.coverage.store[(state, "heartbeat")] += 1
            stats["races: heartbeat renewal between read and write"] += len(renewed)
            return dict.fromkeys(renewed, "heartbeat renewal")
        done: dict[str, str] = {}
        for jid in chosen:
            before = self.other.get(jid)
            try:
                after = self.other.cancel(jid, actor="operator", reason="concurrent cancel")
            except JobFSMError:
                continue
            if after.version != before.version:
                done[jid] = "operator cancel"
        stats["races: operator cancel between read and write"] += len(done)
        return done

    def _sweep(self) -> None:
        """Past every deadline (leases still valid), one sweep fails every job past its
        deadline; past every lease, one more sweep takes every lapsed lease back."""
        deadlines = [j.deadline for j in self._read() if j.deadline]
        if deadlines:
            now = self.clock.advance(max(0.0, max(deadlines) - self.clock.now()) + 0.5)
            self._renew_all()
            recovery.sweep(self.engine)
            for job in self._read():
                jid = job.id
                self._count("R3 the sweep fails every job past its deadline")
                if (
                    job.deadline is not None
                    and job.deadline <= now
                    and job.state in self.deadline_states
                ):
                    self._fail(
                        f"R3 job {jid}: {job.state} past its deadline {job.deadline} "
                        f"(now {now}) after a recovery sweep"
                    )
        now = self.clock.advance(self.policy.lease.ttl + 1.0)
        recovery.sweep(self.engine)
        owned = ("leased", "running", "cancelling")
        self._count("R4 the sweep takes back every lapsed lease")
        for job in self.engine.scan(ScanRequest(states=owned, queues=(self.queue,))):
            if job.lease_until is not None and job.lease_until <= now:
                self._fail(f"R4 job {job.id}: {job.state} with a lease lapsed at {job.lease_until}")

    def _renew_all(self) -> None:
        held = {
            j.id: j.fence
            for j in self._read()
            if j.owner == OWNER and j.state in ("leased", "running", "cancelling")
        }
        self.other.heartbeat(OWNER, held)

    def _check(self, *, final: bool = False) -> None:
        for job in self._read():
            jid = job.id
            history = self.store.history(jid)
            problems = trail_problems(job, history, self.spec, self.policy)
            if problems:
                self._fail("; ".join(problems))
            if final:
                self.ctx.coverage.trail(history)
        self._count("I2/I4/I5/I6/I8 audit trail and replay")
