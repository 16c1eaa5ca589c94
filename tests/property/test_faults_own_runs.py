"""A process's own sweep over runs it holds and runs it no longer holds (I1), and a
reconciler asked about a later attempt of a requeued job (I7): the machine reaches
both paths, production holds both promises, and a sweep or a reconciler input that
breaks them fails the step that meets it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsm.records import Owner
from fsm.service.identity import Identity, Status, Verdict
from fsm.service.maintenance import lost_runs, rescue
from fsm.service.maintenance.report import Report
from fsm.service.reconcile import LostRun, Mark
from fsm.testing.faults import DEFAULT_KINDS, fault_machine, fresh_stores, run_faults
from fsm.testing.faults_late import LateRules

OWN = "own sweep over held and ended runs"
LATER = "later attempt lost, truthful reconciler"


@pytest.fixture
def machine() -> Iterator[LateRules]:
    with fresh_stores("memory://") as factory:
        cls = fault_machine(factory, kinds=DEFAULT_KINDS)
        state = cls()
        assert isinstance(state, LateRules)
        yield state
        state.teardown()


def own_sweep(state: LateRules, *, drop_first: bool) -> None:
    state.submit_batch(kinds=[0, 0])
    state.claim(w=0, limit=2)
    state.invariants_hold()
    state.own_sweep_meets_held_and_ended(w=0, drop_first=drop_first)
    state.check_reconciler_asks()
    state.invariants_hold()


def reconcile_after_requeue(state: LateRules, *, mark: bool, commit: bool) -> None:
    # an attempt marks, commits and is lost; the reconciler cannot tell: investigate
    state.lose_marked_run(w=0, j=0, commit=True, how="crash", mode="unknown")
    state.check_reconciler_asks()
    state.invariants_hold()
    state.reconcile_after_requeue(j=0, mark=mark, commit=commit)
    state.check_reconciler_asks()
    state.invariants_hold()


def test_the_machine_reaches_both_paths_and_production_holds() -> None:
    # when the machine alone runs 40 examples of 40 steps on the memory store (the quick
    # size's 15 of 25 reach an own sweep over held and ended runs only under some draws)
    report = run_faults("memory://", size="quick", models=[], machine=True, examples=40, steps=40)
    # then own sweeps met held and ended runs, every reconciler call was checked, all held
    # (a later attempt after a requeue needs a parked job with an effect: the replays
    # below reach it; the default size reaches it dozens of times)
    assert report.ok, report.failure
    assert report.faults[OWN] >= 1
    assert report.checks["I1 an own sweep judges each own run by itself"] >= 1
    assert report.checks["I7 a reconciler is asked with the lost attempt's marks"] >= 1


@pytest.mark.parametrize("drop_first", [True, False])
def test_an_own_sweep_over_held_and_ended_runs_holds_in_production(
    machine: LateRules, drop_first: bool
) -> None:
    own_sweep(machine, drop_first=drop_first)
    assert machine.stats.checks["I1 an own sweep judges each own run by itself"] >= 1


@pytest.mark.parametrize("drop_first", [True, False])
def test_an_own_verdict_kept_per_owner_fails_the_own_sweep(
    machine: LateRules, drop_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a rescuer that keeps its own process's verdict per owner, as a foreign one's
    def per_owner(self: rescue.Rescuer, identity: Identity, limit: int) -> Report:
        kernel = self.source.kernel
        request = rescue.ScanRequest(states=kernel.spec.sources("expire"), limit=limit)
        verdicts: dict[Owner, Verdict] = {}
        report = Report()
        for job in kernel.store.scan(request):
            if job.owner is None:
                continue
            if job.owner not in verdicts:
                verdicts[job.owner] = identity.judge(job.owner, (job.id, job.fence), self.probe)
            if verdicts[job.owner].status is Status.DEAD:
                report += self.expire(job, verdicts[job.owner])
        return report

    monkeypatch.setattr(rescue.Rescuer, "dead_owners", per_owner)
    # then the step that drops one run and sweeps fails, whichever run comes first
    with pytest.raises(AssertionError, match="I1"):
        own_sweep(machine, drop_first=drop_first)


@pytest.mark.parametrize("mark", [True, False])
@pytest.mark.parametrize("commit", [True, False])
def test_a_later_attempt_is_reconciled_on_its_own_marks(
    machine: LateRules, mark: bool, commit: bool
) -> None:
    reconcile_after_requeue(machine, mark=mark, commit=commit)
    # then the lost later attempt reached its reconcile, and the answer stood on its own
    # marks and effects (I7, checked after the step)
    assert machine.stats.faults[LATER] == 1
    assert machine.stats.checks["I7 a reconciler is asked with the lost attempt's marks"] >= 1


def test_a_reconciler_given_every_attempts_marks_fails(
    machine: LateRules, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a lost run built with the marks of every attempt
    def every_mark(kernel: object, job: object) -> LostRun:
        marks = tuple(
            Mark(str(e.data.get("label")), e.data.get("external_id"), e.at, e.fence)
            for e in kernel.store.history(job.id)  # type: ignore[attr-defined]
            if e.event == "mark" and e.outcome == "applied"
        )
        return LostRun(job=job, attempt=job.attempt, marks=marks)  # type: ignore[attr-defined,arg-type]

    monkeypatch.setattr(lost_runs, "lost_run", every_mark)
    # then the later attempt, marked but lost before its effect, fails I7
    with pytest.raises(AssertionError, match="I7"):
        reconcile_after_requeue(machine, mark=True, commit=False)
