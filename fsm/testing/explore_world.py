"""One small world of the exhaustive mode (`fsm.testing.explore`): its actions, its
canonical state and the invariants checked after every transition.

A world is a store (made fresh per world), a `FakeClock`, the production `Engine`,
a few simulated workers (`faults_machine.SimWorker`: the production `Identity` and
run table over a simulated process table) and jobs submitted at the start. Every
action is one production call (`Engine.claim`, `start`, `succeed`, `fail`, `mark`,
`heartbeat`, `cancelled_ack`, `cancel`, `requeue`, `fsm.service.maintenance.sweep`
with the kinds' reconcilers asked through a held `Asker`), or a fault (a worker
killed and restarted, the clock advanced, a held reconciler answer delivered).
Workers act only when an action names them, so a worker that has not heartbeated
is a stalled one, and what it reports after a sweep and another worker's claim
is a zombie's report.

The canonical state (`key`) is what decides what can happen next: per job its
state, fence, attempt, recoveries, budgets, owner, lease and due times relative
to now; per worker what it holds; the budgets of faults left; the held answers;
the outside effects. It leaves out versions, absolute times and the audit trail,
which only grow; the trails are checked after every transition instead. Workers
are interchangeable: the key is the least over their permutations (symmetry
reduction).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import attrs

from ..clock import FakeClock
from ..errors import IllegalTransition, JobFSMError, LeaseLost
from ..inputs import KindPolicy
from ..lifecycle.invariants import owned_states, requeues, trail_problems
from ..lifecycle.spec import lifecycle
from ..policies import Backoff, LeasePolicy, Policy, RecoveryPolicy, RetryPolicy
from ..ports import ScanRequest, Store
from ..records import Job, Owner
from ..service import maintenance
from ..service.engine import Engine
from ..service.identity import Identity
from ..worker.claims import kind_policy_arg
from .faults_late import HeldAsker
from .faults_machine import SimWorker
from .faults_outside import OutsideSystem
from .hosts import SimulatedProcesses

QUEUE = "explore"
HOST = "explore-host"
#: the kinds a world's jobs may have: retry-safe, or not retry-safe with marks and a
#: reconciler that answers truthfully from the outside effects
KINDS: dict[str, dict[str, bool]] = {
    "safe": {"retry_safe": True, "marks_outside_calls": False},
    "charge": {"retry_safe": False, "marks_outside_calls": True},
}


@attrs.frozen
class Scope:
    """What one exhaustive run explores: every interleaving within these bounds."""

    name: str
    about: str
    workers: int = 2
    kinds: tuple[str, ...] = ("safe", "charge")
    crashes: int = 1
    advances: int = 2
    #: seconds per clock advance (past the 30 s lease, past a first backoff)
    step: float = 31.0
    sweeps: int = 2
    answers: int = 1
    operator: int = 1
    max_attempts: int = 2

    def __attrs_post_init__(self) -> None:
        unknown = set(self.kinds) - set(KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"scope kinds must be some of {sorted(KINDS)}, not {self.kinds}")
        if not 1 <= self.workers <= 3:
            raise ValueError("a scope has 1 to 3 workers")


def world_policy() -> Policy:
    return Policy.seeded(
        0,
        retry=RetryPolicy(max_attempts=2, backoff=Backoff(base=1.0, cap=60.0, jitter=False)),
        lease=LeasePolicy(ttl=30.0, heartbeat_interval=5.0),
        recovery=RecoveryPolicy(max_recoveries=1),
    )


class World:
    """One world of `scope`, at its start; `do(action)` moves it one transition and
    returns the first broken invariant (or None)."""

    def __init__(self, scope: Scope, store_factory: Callable[[], Store]) -> None:
        self.scope = scope
        self.spec = lifecycle()
        self.owned = owned_states(self.spec)
        self.clock = FakeClock()
        self.policy = world_policy()
        self.store = store_factory()
        kinds = {
            k: KindPolicy(
                queue=QUEUE,
                max_attempts=scope.max_attempts,
                retry_safe=KINDS[k]["retry_safe"],
                marks_outside_calls=KINDS[k]["marks_outside_calls"],
            )
            for k in scope.kinds
        }
        self.engine = Engine(
            self.store, clock=self.clock, policy=self.policy, kinds=kinds, spec=self.spec
        )
        self.processes = SimulatedProcesses()
        self.labels: dict[Owner, tuple[int, int]] = {}
        self.pids = itertools.count(100)
        self.workers: list[SimWorker] = []
        self.generation: list[int] = []
        for slot in range(scope.workers):
            self.workers.append(self._new_worker(slot, 0))
            self.generation.append(0)
        self.ids = [
            self.engine.submit(kind, {"n": i}, priority=i).id for i, kind in enumerate(scope.kinds)
        ]
        self.index = {jid: i for i, jid in enumerate(self.ids)}
        self.left = {
            "crash": scope.crashes,
            "advance": scope.advances,
            "sweep": scope.sweeps,
            "answer": scope.answers,
            "operator": scope.operator,
        }
        self.effects: dict[str, list[int]] = {}
        self.outside = OutsideSystem(self.effects, self.clock.now)
        self.asker = HeldAsker(self.store.get)
        self.marking = [k for k in scope.kinds if KINDS[k]["marks_outside_calls"]]

    def close(self) -> None:
        self.store.close()

    def _new_worker(self, slot: int, generation: int) -> SimWorker:
        pid = next(self.pids)
        self.processes.start(pid)
        worker = SimWorker(Identity(HOST, pid=pid, processes=self.processes))
        self.labels[worker.owner] = (slot, generation)
        return worker

    # --- the actions enabled now ---------------------------------------------------

    def enabled(self) -> list[str]:
        jobs = [self.store.get(jid) for jid in self.ids]
        now = self.clock.now()
        lease = self.spec.sources("lease")
        due = any(j is not None and j.state in lease and j.run_after <= now for j in jobs)
        out: list[str] = []
        for w, worker in enumerate(self.workers):
            if due:
                out.append(f"claim {w}")
            for jid in sorted(worker.held, key=self.index.__getitem__):
                j, phase = self.index[jid], worker.held[jid].phase
                if phase == "leased":
                    out.append(f"start {w} {j}")
                elif phase == "running":
                    out.append(f"succeed {w} {j}")
                    if not worker.held[jid].effect_done:
                        # a handler past its outside call returns: it does not fail
                        out.append(f"fail {w} {j}")
                        job = jobs[j]
                        if job is not None and job.kind in self.marking:
                            out.append(f"mark {w} {j}")
                elif phase == "cancelling":
                    out.append(f"ack {w} {j}")
            if worker.held:
                out.append(f"heartbeat {w}")
            if self.left["sweep"]:
                out.append(f"sweep {w}")
            if self.left["crash"]:
                out.append(f"crash {w}")
        if self.left["advance"]:
            out.append("advance")
        if self.left["answer"] and self.asker.calls:
            out.append("answer")
        if self.left["operator"]:
            for j, job in enumerate(jobs):
                if job is None:
                    continue
                if job.state in self.spec.sources("cancel"):
                    out.append(f"cancel {j}")
                if job.state in self.spec.sources("requeue"):
                    out.append(f"requeue {j}")
        return out

    # --- one transition ------------------------------------------------------------

    def do(self, action: str, *, check: bool = True) -> str | None:
        """Carry `action` out; the first broken invariant after it, or None. Without
        `check` only the action's own checks run (a replayed prefix: checked before)."""
        before = {jid: self.store.get(jid) for jid in self.ids}
        trails = {jid: len(self.store.history(jid)) for jid in self.ids} if check else {}
        name, *args = action.split()
        n = [int(a) for a in args]
        problem = getattr(self, f"_{name}")(*n)
        return problem or (self.check(before, trails) if check else None)

    def _claim(self, w: int) -> str | None:
        worker = self.workers[w]
        with worker.identity.claiming():
            got = self.engine.claim(worker.owner, (QUEUE,), limit=1)
        for job in got:
            worker.take(job)
        return None

    def _report(self, w: int, j: int, event: str, call: Callable[[str, int], Any]) -> str | None:
        """A worker's report with the fence it holds: a stale one must change nothing."""
        worker = self.workers[w]
        jid = self.ids[j]
        fence = worker.held[jid].fence
        before = self.store.get(jid)
        assert before is not None
        try:
            call(jid, fence)
            applied = True
        except (LeaseLost, IllegalTransition):
            applied = False
        after = self.store.get(jid)
        assert after is not None
        if before.fence != fence and (applied or after.version != before.version):
            return (
                f"I7 job {j}: a stale {event} with fence {fence} (current {before.fence}) "
                "changed the job"
            )
        if after.fence != fence or after.owner != worker.owner or after.state not in self.owned:
            worker.let_go(jid)
        else:
            worker.held[jid].phase = after.state
        return None

    def _start(self, w: int, j: int) -> str | None:
        return self._report(w, j, "start", self._start_call)

    def _start_call(self, jid: str, fence: int) -> Job:
        job = self.store.get(jid)
        assert job is not None
        policy = kind_policy_arg(
            self.engine.kinds[job.kind],
            default_recoveries=self.policy.recovery.max_recoveries,
            reconciler=job.kind in self.marking,
        )
        return self.engine.transition(jid, "start", fence=fence, kind_policy=policy)

    def _succeed(self, w: int, j: int) -> str | None:
        return self._report(w, j, "succeed", lambda jid, f: self.engine.succeed(jid, f, {"f": f}))

    def _fail(self, w: int, j: int) -> str | None:
        return self._report(w, j, "fail", lambda jid, f: self.engine.fail(jid, f, "raised"))

    def _ack(self, w: int, j: int) -> str | None:
        return self._report(
            w, j, "cancelled_ack", lambda jid, f: self.engine.cancelled_ack(jid, f, "partial")
        )

    def _mark(self, w: int, j: int) -> str | None:
        """The handler marks, then commits its fenced outside effect."""
        worker = self.workers[w]
        jid = self.ids[j]
        held = worker.held[jid]

        def mark(jid: str, fence: int) -> Job:
            return self.engine.mark(jid, fence, "calling outside", f"ext-{jid}")

        problem = self._report(w, j, "mark", mark)
        job = self.store.get(jid)
        fenced = job is not None and job.fence == held.fence and job.state in self.owned
        if problem is None and fenced:
            self.effects.setdefault(jid, []).append(held.fence)
            held.effect_done = True
        return problem

    def _heartbeat(self, w: int) -> str | None:
        worker = self.workers[w]
        fences = {jid: h.fence for jid, h in worker.held.items()}
        renewed = self.engine.heartbeat(worker.owner, fences)
        for jid, fence in fences.items():
            job = self.store.get(jid)
            if jid in renewed:
                if job is None or job.fence != fence or job.owner != worker.owner:
                    return f"I1 job {self.index[jid]}: a heartbeat renewed a lease not held"
                worker.held[jid].phase = renewed[jid]
            else:
                worker.let_go(jid)
        return None

    def _crash(self, w: int) -> str | None:
        """kill -9 and restart: the process and its memory are gone; a new incarnation."""
        self.left["crash"] -= 1
        old = self.workers[w]
        self.processes.kill(old.owner.pid)
        self.generation[w] += 1
        self.workers[w] = self._new_worker(w, self.generation[w])
        return None

    def _advance(self) -> str | None:
        self.left["advance"] -= 1
        self.clock.advance(self.scope.step)
        return None

    def _sweep(self, w: int) -> str | None:
        """The production recovery list, judged by worker `w`'s identity, reconcilers
        asked through the held asker (the answer is a separate action)."""
        self.left["sweep"] -= 1
        worker = self.workers[w]
        before = {jid: self.store.get(jid) for jid in self.ids}
        maintenance.sweep(
            self.engine,
            worker.identity,
            reconcilers=self.outside.reconcilers(self.marking),
            asker=self.asker,
        )
        for jid, job in before.items():
            if job is None or job.state not in self.owned:
                continue
            taken = [
                e
                for e in self.store.history(jid)
                if e.version > job.version and e.event == "expire" and e.outcome == "applied"
            ]
            if not taken or taken[0].data.get("verdict") != "dead":
                continue
            if any(
                x.owner == job.owner and jid in x.held and x.held[jid].fence == job.fence
                for x in self.workers
            ):
                j = self.index[jid]
                return f"I1 job {j}: expired on a death verdict while its owner ran it"
        return None

    def _answer(self) -> str | None:
        self.left["answer"] -= 1
        late = self.asker.calls[0]
        before = self.store.get(late.job_id)
        self.asker.deliver(late)
        after = self.store.get(late.job_id)
        if (
            before is not None
            and after is not None
            and before.fence != late.fence
            and after.version != before.version
        ):
            return (
                f"I7 job {self.index[late.job_id]}: a reconciler answer for fence "
                f"{late.fence} arrived after the claim moved and changed the job"
            )
        return None

    def _cancel(self, j: int) -> str | None:
        self.left["operator"] -= 1
        self.engine.cancel(self.ids[j], actor="operator", reason="explore")
        return None

    def _requeue(self, j: int) -> str | None:
        self.left["operator"] -= 1
        self.engine.requeue(self.ids[j], actor="operator", reason="explore", attempts=1)
        return None

    # --- invariants ----------------------------------------------------------------

    def check(
        self, before: dict[str, Job | None], trails: dict[str, int] | None = None
    ) -> str | None:
        """The invariants of specs/invariants.md that a state shows (see module doc); a
        job whose record and trail did not change since `before`/`trails` keeps its
        already checked trail."""
        listed = self.store.scan(ScanRequest(states=self.spec.states, queues=(QUEUE,)))
        if sorted(j.id for j in listed) != sorted(self.ids):
            return f"I3 the store lists {len(listed)} jobs, not the {len(self.ids)} submitted"
        for j, jid in enumerate(self.ids):
            job = self.store.get(jid)
            if job is None:
                return f"I3 job {j} is lost"
            old = before.get(jid)
            if old is not None and (job.fence < old.fence or job.version < old.version):
                return f"I2 job {j}: fence or version went back"
            history = self.store.history(jid)
            unchanged = (
                trails is not None
                and old is not None
                and old.version == job.version
                and trails.get(jid) == len(history)
            )
            problems = [] if unchanged else trail_problems(job, history, self.spec, self.policy)
            if problems:
                return f"job {j}: " + "; ".join(problems)
            holders = [x for x in self.workers if jid in x.held and x.held[jid].fence == job.fence]
            if job.state in self.owned and (
                len(holders) > 1 or (holders and holders[0].owner != job.owner)
            ):
                return f"I1 job {j} ({job.state}, fence {job.fence}) is held by two workers"
            fences = self.effects.get(jid, [])
            if not job.retry_safe and len(fences) > 1 + requeues(history):
                return f"I7 job {j}: its outside effect committed {len(fences)} times"
        return None

    # --- the canonical state -------------------------------------------------------

    def key(self) -> tuple[Any, ...]:
        """The state, least over the permutations of the workers."""
        now = self.clock.now()
        jobs = [self.store.get(jid) for jid in self.ids]
        best: tuple[Any, ...] | None = None
        for perm in itertools.permutations(range(len(self.workers))):
            k = self._key(perm, jobs, now)
            if best is None or k < best:
                best = k
        assert best is not None
        return best

    def _key(self, perm: tuple[int, ...], jobs: list[Job | None], now: float) -> tuple[Any, ...]:
        def owner(o: Owner | None) -> tuple[int, int]:
            if o is None:
                return (-1, -1)
            slot, gen = self.labels[o]
            return (perm[slot], gen)

        def rel(t: float | None) -> float:
            return -1.0 if t is None else max(0.0, t - now)

        job_part = tuple(
            (
                j.state,
                j.fence,
                j.attempt,
                j.max_attempts,
                j.recoveries,
                owner(j.owner),
                rel(j.lease_until),
                rel(j.run_after),
                j.reconciler,
            )
            for j in jobs
            if j is not None
        )
        slots: list[Any] = [None] * len(self.workers)
        for w, worker in enumerate(self.workers):
            slots[perm[w]] = (
                self.generation[w],
                tuple(
                    (self.index[jid], h.fence, h.phase, h.effect_done)
                    for jid, h in sorted(worker.held.items(), key=lambda kv: self.index[kv[0]])
                ),
            )
        pending = tuple((self.index[c.job_id], c.fence) for c in self.asker.calls)
        effects = tuple(tuple(self.effects.get(jid, ())) for jid in self.ids)
        return (job_part, tuple(slots), tuple(sorted(self.left.items())), pending, effects)


def replay_world(
    scope: Scope,
    store_factory: Callable[[], Store],
    path: tuple[str, ...],
    *,
    check_all: bool = False,
) -> tuple[World, str | None]:
    """A world of `scope` after `path`, the invariants checked after its last action
    (and each action's own checks on the way); the first broken one (the world is then
    left where it broke)."""
    world = World(scope, store_factory)
    for i, action in enumerate(path):
        try:
            problem = world.do(action, check=check_all or i == len(path) - 1)
        except JobFSMError as err:
            problem = f"{action} raised {type(err).__name__}: {err}"
        if problem:
            return world, f"after {action!r}: {problem}"
    return world, None
