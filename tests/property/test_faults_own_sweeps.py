"""A process's own sweeps beside its claims (I1, W3): the worker model sweeps while its
claim is in flight, and the machine sweeps beside a recheck claim whose reconciler
answer is still out; each reaches its path, and each is held to its promise."""

from __future__ import annotations

from fsm.testing.faults import run_faults

RECHECK = "recheck claim with its answer held"
OWN_SWEEP = "own sweep while a recheck's answer is out"


def test_the_worker_model_sweeps_while_its_claim_is_in_flight_and_as_it_ends() -> None:
    # when the worker model runs at the quick size
    report = run_faults("memory://", size="quick", models=["worker"], machine=False)
    # then every example swept with the worker's own identity at both points, W3 held
    assert report.ok, report.failure
    in_flight = report.faults["worker: own sweep while its claim is in flight"]
    assert in_flight >= 1
    assert report.faults["worker: own sweep as its claim ends"] >= 1
    assert report.checks["W3 a claimed run is never judged dead by its own process"] >= 1


def test_the_machine_sweeps_beside_a_recheck_claim_whose_answer_is_out() -> None:
    # when the machine alone runs at the quick size on the memory store
    report = run_faults("memory://", size="quick", models=[], machine=True)
    # then it claimed lost runs again for a recheck, held their answers, swept with the
    # same process meanwhile, and each claim was left as it was
    assert report.ok, report.failure
    assert report.faults[RECHECK] >= 1
    assert report.faults[OWN_SWEEP] == report.faults[RECHECK]
    assert report.checks["I1 a recheck claim is held by its own process"] == report.faults[RECHECK]
