"""The `claims` fault model: claims that combine queues, kinds, ids, limits and priorities.

A worker claims with the kinds it has handlers for, by the ids its wake-ups named,
from its queues, up to its free slots, optionally starting what it leases in the
same transaction (`fsm.worker.claims`). Each example opens a fresh database,
submits jobs across three queues and three kinds with mixed priorities, some not
due yet, some past their deadline, some already leased by another worker, then
sends claims through the production `Engine.claim` with every combination drawn:
queues (one or several), kinds (none given, some, or an empty tuple), ids (none
given, or ids of any jobs, matching or not, with duplicates), a limit and
claim-and-start.

Promises, from the records read just before each claim:

- Q1 a claim returns only jobs that match every filter: a queue asked for, a kind
  asked for, an id asked for, and claimable (a lease source state, due, not past
  its deadline); each leased (or, with start, running) by the claimer with a new fence;
- Q2 it returns as many as it may: min(limit, matching jobs), each once;
- Q3 without ids, it takes the best first: no matching job left behind has a lower
  (priority, run_after) than one it took;
- Q4 a job it did not return is unchanged (same version).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..lifecycle.spec import lifecycle
from ..records import Job, Owner
from ..service.engine import Engine
from .faults_machine import suite_policy
from .faults_models import ModelRun

CLAIMER = Owner(host="claims-sim", pid=3, incarnation="claims-incarnation-a")
OTHER = Owner(host="claims-sim", pid=4, incarnation="claims-incarnation-b")
KINDS = ("alpha", "beta", "gamma")
N_QUEUES = 3

_job = st.tuples(
    st.integers(0, N_QUEUES - 1),  # queue
    st.integers(0, len(KINDS) - 1),  # kind
    st.sampled_from((-5, 0, 0, 1, 7)),  # priority
    st.sampled_from((0.0, 0.0, 3.0, 50.0)),  # delay: due, due after the clock moves, not due
    st.sampled_from((None, None, 5.0)),  # deadline (passes when the clock moves)
    st.booleans(),  # leased by another worker first
)
_claim = st.fixed_dictionaries(
    {
        "queues": st.lists(st.integers(0, N_QUEUES - 1), min_size=1, max_size=3, unique=True),
        "kinds": st.one_of(
            st.none(), st.lists(st.integers(0, len(KINDS) - 1), max_size=3, unique=True)
        ),
        "ids": st.one_of(st.none(), st.lists(st.integers(0, 15), min_size=1, max_size=6)),
        "limit": st.integers(1, 6),
        "start": st.booleans(),
    }
)
_example = st.fixed_dictionaries(
    {
        "jobs": st.lists(_job, min_size=1, max_size=10),
        "claims": st.lists(_claim, min_size=1, max_size=3),
        "advance": st.sampled_from((0.0, 4.0, 10.0)),
    }
)


def _rank(job: Job) -> tuple[int, float]:
    return (job.priority, job.run_after)


class ClaimsModel:
    name: ClassVar[str] = "claims"
    about: ClassVar[str] = "claims combining queues, kinds, ids, limits, priorities and start"
    examples: ClassVar[dict[str, int]] = {"quick": 15, "default": 150, "thorough": 1500}

    def run(self, ctx: ModelRun) -> None:
        @ctx.settings(self.examples[ctx.size])
        @given(example=_example)
        def one(example: dict[str, Any]) -> None:
            with ctx.database() as opener:
                self._example(ctx, opener(), example)

        one()

    def _example(self, ctx: ModelRun, store: Any, example: dict[str, Any]) -> None:
        tag = uuid.uuid4().hex[:10]
        queues = [f"claims-{tag}-{q}" for q in range(N_QUEUES)]
        clock = FakeClock()
        engine = Engine(
            store,
            clock=clock,
            policy=suite_policy(),
            kinds={k: KindPolicy(queue=queues[0]) for k in KINDS},
            spec=lifecycle(),
        )
        sources = frozenset(engine.spec.sources("lease"))
        ids: list[str] = []
        for q, k, priority, delay, deadline, taken in example["jobs"]:
            opts: dict[str, Any] = {"queue": queues[q], "priority": priority, "delay": delay}
            if deadline is not None:
                opts["deadline"] = clock.now() + deadline
            job = engine.submit(KINDS[k], None, **opts)
            ids.append(job.id)
            if taken and delay == 0.0:
                engine.claim(OTHER, (queues[q],), limit=1, ids=[job.id])
        clock.advance(example["advance"])
        for req in example["claims"]:
            self._claim(ctx, engine, store=store, queues=queues, ids=ids, sources=sources, req=req)

    def _claim(
        self,
        ctx: ModelRun,
        engine: Engine,
        *,
        store: Any,
        queues: list[str],
        ids: list[str],
        sources: frozenset[str],
        req: dict[str, Any],
    ) -> None:
        asked_queues = tuple(queues[q] for q in req["queues"])
        kinds = None if req["kinds"] is None else tuple(KINDS[k] for k in req["kinds"])
        wanted = None if req["ids"] is None else [ids[i % len(ids)] for i in req["ids"]]
        now = engine.clock.now()
        before = {jid: store.get(jid) for jid in ids}
        matching = {
            jid: job
            for jid, job in before.items()
            if job is not None
            and job.queue in asked_queues
            and (kinds is None or job.kind in kinds)
            and (wanted is None or jid in wanted)
            and job.state in sources
            and job.run_after <= now
            and (job.deadline is None or job.deadline > now)
        }
        start: Callable[[Job], dict[str, Any]] | None = (lambda job: {}) if req["start"] else None
        got = engine.claim(
            CLAIMER, asked_queues, limit=req["limit"], ids=wanted, kinds=kinds, start=start
        )
        what = (
            f"claim(queues={asked_queues}, kinds={kinds}, ids={wanted}, limit={req['limit']}, "
            f"start={req['start']})"
        )
        ctx.stats.faults["claim with " + "+".join(self._filters(req))] += 1
        taken = [j.id for j in got]
        if len(set(taken)) != len(taken):
            raise AssertionError(f"Q2 {what} returned a job twice: {taken}")
        for job in got:
            old = matching.get(job.id)
            if old is None:
                was = before.get(job.id)
                raise AssertionError(
                    f"Q1 {what} returned job {job.id} that does not match "
                    f"(queue {getattr(was, 'queue', None)}, kind {getattr(was, 'kind', None)}, "
                    f"state {getattr(was, 'state', None)}, run_after "
                    f"{getattr(was, 'run_after', None)}, deadline {getattr(was, 'deadline', None)}"
                    f", now {now})"
                )
            states = ("leased", "running") if req["start"] else ("leased",)
            if job.owner != CLAIMER or job.fence != old.fence + 1 or job.state not in states:
                raise AssertionError(
                    f"Q1 {what}: job {job.id} came back {job.state} for {job.owner} with "
                    f"fence {job.fence} (was {old.fence})"
                )
        expected = min(req["limit"], len(matching))
        if len(got) != expected:
            raise AssertionError(
                f"Q2 {what} returned {len(got)} jobs, not {expected}: matching "
                f"{sorted(matching)}, returned {taken}"
            )
        if wanted is None and got:
            worst = max(_rank(matching[j]) for j in taken)
            better = [j for j, job in matching.items() if j not in taken and _rank(job) < worst]
            if better:
                raise AssertionError(
                    f"Q3 {what} left {better} behind, ranked before {worst} (priority, run_after)"
                )
        for jid, job in before.items():
            if job is None or jid in taken:
                continue
            now_job = store.get(jid)
            if now_job is None or now_job.version != job.version:
                raise AssertionError(f"Q4 {what} changed job {jid}, which it did not return")
        checks = ctx.stats.checks
        checks["Q1 claims return only matching, claimable jobs"] += 1
        checks["Q2 claims return min(limit, matching)"] += 1
        checks["Q3 claims take the best priority first"] += int(wanted is None)
        checks["Q4 jobs a claim did not return are unchanged"] += 1

    @staticmethod
    def _filters(req: dict[str, Any]) -> list[str]:
        parts = ["queues" if len(req["queues"]) > 1 else "queue"]
        if req["kinds"] is not None:
            parts.append("kinds" if req["kinds"] else "no kinds")
        if req["ids"] is not None:
            parts.append("ids")
        if req["start"]:
            parts.append("start")
        return parts
