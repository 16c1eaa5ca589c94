"""Store conformance for dependencies (`fsm.ports.TracksDependencies`, docs/dependencies.md).

Mix `DependencyConformance` into a store's conformance class when the store keeps
prerequisites: it checks that insert stores them (and refuses unknown ones writing
nothing), that the store returns them and finds dependents by prerequisite, that the
engine releases a waiting job exactly as the spec's guards say (also when a batch of
worker reports finishes its prerequisite), that the recovery sweep releases what a crash
left waiting, and that prune keeps what a job waits for.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadInput, UnknownPrerequisite
from ..inputs import MAX_PREREQUISITES
from ..lifecycle.core import decide, replay, same_except_heartbeats
from ..ports import TracksDependencies
from ..records import Job
from ..service import maintenance as recovery
from ..service.engine import Engine
from .conformance import StoreConformance, owner, raised


def _run(engine: Engine, job: Job, outcome: str = "succeed") -> Job:
    """Lease, start and finish `job` (succeed, or fail permanently)."""
    (leased,) = engine.claim(owner(), queues=[job.queue], ids=[job.id])
    started = engine.start(leased.id, leased.fence)
    if outcome == "succeed":
        return engine.succeed(started.id, started.fence, {"ok": True})
    return engine.fail(started.id, started.fence, "boom", permanent=True)


def _finish_without_release(engine: Engine, job: Job) -> Job:
    """Finish `job` (cancel) written straight to the store, as a process that died right
    after its write would leave it: nobody has released its dependents yet."""
    current = engine.store.get(job.id)
    assert current is not None
    d = decide(current, "cancel", engine.clock.now(), engine.policy, actor="t", reason="crash")
    (written,) = engine.store.apply([d])
    assert isinstance(written, Job)
    return written


class DependencyConformance(StoreConformance):
    """Dependencies on a store that keeps them (mix in beside StoreConformance)."""

    def deps(self) -> TracksDependencies:
        store = self.store
        assert isinstance(store, TracksDependencies), f"{type(store).__name__} keeps no deps"
        return store

    def _submit(self, engine: Engine, n: int = 0, **opts: Any) -> Job:
        return engine.submit("conformance", {"n": n}, **opts)

    def test_a_dependent_waits_and_the_store_returns_its_prerequisites_and_dependents(
        self,
    ) -> None:
        engine, _ = self.engine()
        a, b = self._submit(engine, 1), self._submit(engine, 2)
        c = self._submit(engine, 3, after=[a.id, b.id, a.id])
        assert c.state == "waiting"
        assert self.store.get(c.id) == c
        assert self.deps().prerequisites([c.id, a.id]) == {c.id: {a.id: "queued", b.id: "queued"}}
        assert [j.id for j in self.deps().dependents([a.id], ("waiting",), 10)] == [c.id]
        assert self.deps().dependents([a.id], ("queued",), 10) == []
        assert engine.claim(owner(), limit=10, ids=[c.id]) == []

    def test_a_dependent_is_released_once_every_prerequisite_succeeded(self) -> None:
        engine, _ = self.engine()
        a, b = self._submit(engine, 1), self._submit(engine, 2)
        c = self._submit(engine, 3, after=[a.id, b.id])
        _run(engine, a)
        assert engine.get(c.id).state == "waiting"
        _run(engine, b)
        released = engine.get(c.id)
        assert released.state == "queued"
        last = self.store.history(c.id)[-1]
        moved = (last.event, last.from_state, last.to_state)
        assert moved == ("dependencies_met", "waiting", "queued")
        assert last.data["prerequisites"] == {a.id: "succeeded", b.id: "succeeded"}
        replayed = replay(self.store.history(c.id), engine.policy)
        assert replayed is not None
        assert same_except_heartbeats(replayed, released)
        assert _run(engine, released).state == "succeeded"

    def test_a_submit_after_finished_prerequisites_is_released_at_once(self) -> None:
        engine, _ = self.engine()
        a = _run(engine, self._submit(engine, 1))
        c = self._submit(engine, 2, after=[a.id])
        assert c.state == "queued"
        assert [e.event for e in self.store.history(c.id)] == ["submit", "dependencies_met"]

    def test_a_failed_prerequisite_applies_the_dependents_declared_rule(self) -> None:
        engine, _ = self.engine()
        a, slow = self._submit(engine, 1), self._submit(engine, 2)
        cancel = self._submit(engine, 3, after=[a.id, slow.id])
        park = self._submit(engine, 4, after=[a.id, slow.id], on_failed_dependency="investigate")
        run = self._submit(engine, 5, after=[a.id, slow.id], on_failed_dependency="run")
        _run(engine, a, "fail")
        assert engine.get(cancel.id).state == "cancelled"
        assert engine.get(park.id).state == "investigate"
        assert a.id in (engine.get(cancel.id).last_error or "")
        assert engine.get(run.id).state == "waiting"  # runs once every prerequisite finished
        _run(engine, slow)
        assert engine.get(run.id).state == "queued"

    def test_a_chain_follows_a_cancelled_dependent(self) -> None:
        engine, _ = self.engine()
        a = self._submit(engine, 1)
        b = self._submit(engine, 2, after=[a.id])
        c = self._submit(engine, 3, after=[b.id])
        engine.cancel(a.id, actor="t", reason="chain")
        assert engine.get(b.id).state == "cancelled"
        assert engine.get(c.id).state == "cancelled"

    def test_unknown_prerequisites_are_refused_and_nothing_is_written(self) -> None:
        engine, _ = self.engine()
        a = self._submit(engine, 1)
        before = self.store.counts()
        err = raised(
            UnknownPrerequisite,
            lambda: engine.submit_many(
                [("conformance", 2, {}), ("conformance", 3, {"after": [a.id, "NO-SUCH-JOB"]})]
            ),
            "a submit naming an unknown job must be refused",
        )
        assert "NO-SUCH-JOB" in str(err)
        assert a.id not in err.missing
        assert self.store.counts() == before
        too_many = [a.id] + [f"J{i}" for i in range(MAX_PREREQUISITES)]
        raised(BadInput, lambda: self._submit(engine, 4, after=too_many), "over the cap")
        raised(BadInput, lambda: self._submit(engine, 5, on_failed_dependency="run"), "no after")
        raised(
            BadInput,
            lambda: self._submit(engine, 6, after=[a.id], on_failed_dependency="x"),
            "an unknown rule",
        )
        assert self.store.counts() == before

    def test_a_duplicate_key_returns_the_stored_job_with_its_prerequisites(self) -> None:
        engine, _ = self.engine()
        a, b = self._submit(engine, 1), self._submit(engine, 2)
        first = self._submit(engine, 3, after=[a.id], idempotency_key="dep-key")
        again = self._submit(engine, 3, after=[b.id], idempotency_key="dep-key")
        assert again == first
        assert self.deps().prerequisites([first.id]) == {first.id: {a.id: "queued"}}

    def test_a_batch_of_reports_releases_the_dependents_of_the_jobs_it_finished(self) -> None:
        engine, _ = self.engine()
        a, b = self._submit(engine, 1), self._submit(engine, 2)
        c = self._submit(engine, 3, after=[a.id])
        d = self._submit(engine, 4, after=[b.id], on_failed_dependency="run")
        leased = engine.claim(owner(), limit=10, ids=[a.id, b.id])
        running = [engine.start(j.id, j.fence) for j in leased]
        out = engine.report_many(
            [(j, "succeed", {"fence": j.fence, "result": {"ok": True}}) for j in running]
        )
        assert {j.state for j in out if isinstance(j, Job)} == {"succeeded"}
        assert engine.get(c.id).state == "queued", "left waiting for the recovery sweep"
        assert engine.get(d.id).state == "queued"
        assert self.store.history(c.id)[-1].event == "dependencies_met"

    def test_the_recovery_sweep_releases_what_a_crash_left_waiting(self) -> None:
        engine, _ = self.engine()
        a = self._submit(engine, 1)
        c = self._submit(engine, 2, after=[a.id], on_failed_dependency="run")
        _finish_without_release(engine, a)
        assert engine.get(c.id).state == "waiting"
        report = recovery.sweep(engine)
        assert report.released == 1
        assert engine.get(c.id).state == "queued"
        assert self.store.history(c.id)[-1].event == "dependency_failed"

    def test_the_sweep_walks_waiting_jobs_a_bounded_slice_at_a_time(self) -> None:
        engine, _ = self.engine()
        blocker = self._submit(engine, 0)
        waiting = sorted(self._submit(engine, i, after=[blocker.id]).id for i in range(5))
        first = self.deps().in_states_after(("waiting",), "", 2)
        assert [j.id for j in first] == waiting[:2]
        rest = self.deps().in_states_after(("waiting",), first[-1].id, 10)
        assert [j.id for j in rest] == waiting[2:]
        assert len(self.deps().dependents([blocker.id], ("waiting",), 3)) == 3
        _finish_without_release(engine, blocker)
        for _ in range(3):  # 5 jobs, 2 per pass: every one within 3 passes
            recovery.sweep(engine, limit=2)
        assert {engine.get(i).state for i in waiting} == {"cancelled"}

    def test_prune_keeps_a_prerequisite_while_a_job_waits_for_it(self) -> None:
        engine, clock = self.engine()
        a = self._submit(engine, 1)
        c = self._submit(engine, 2, after=[a.id], on_failed_dependency="run")
        _finish_without_release(engine, a)
        clock.advance(10_000.0)
        engine.prune()
        assert self.store.get(a.id) is not None, "pruned while a job still waits for it"
        recovery.sweep(engine)
        assert engine.get(c.id).state == "queued"
        engine.prune()
        assert self.store.get(a.id) is None
        assert self.deps().prerequisites([c.id]) == {c.id: {a.id: None}}
