"""The fault machine's outside system (fsm/testing/faults_outside.py): a hanging
reconciler hangs until the machine releases it, never for a span of wall-clock time.
The recovery sweep reads the process's count of hung reconciler threads against
MAX_HUNG, so a hang that ended by the clock made a step's path depend on how fast the
steps before it ran, and hypothesis failed runs as Flaky when a replay went another way."""

from __future__ import annotations

import time

from adapters.memory import MemoryStore
from fsm.service.engine import Engine
from fsm.service.reconcile import LostRun, ask, hung
from fsm.testing.faults_outside import OutsideSystem


def _lost_run() -> LostRun:
    job = Engine(MemoryStore()).submit("charge", {})
    return LostRun(job=job, attempt=1, marks=())


def test_a_hanging_reconciler_stays_hung_however_slow_the_step_until_released() -> None:
    # given the outside system's reconciler in its hanging mode
    outside = OutsideSystem({}, lambda: 0.0)
    outside.mode = "hangs"
    reconciler = outside.reconcilers(["charge"])["charge"]
    before = hung()
    try:
        # when it is asked, and the step goes on slowly (longer than a hang once lasted)
        answer, failure = ask(reconciler, _lost_run())
        time.sleep(0.3)
        # then the answer is unknown, and its thread is still counted as hung
        assert answer.answer == "unknown"
        assert failure is not None
        assert "hung past" in failure
        assert hung() == before + 1
    finally:
        outside.release()
    # and once released, no thread of it is left
    assert hung() == before


def test_a_call_after_a_release_hangs_again() -> None:
    # given a hanging reconciler whose earlier calls were released
    outside = OutsideSystem({}, lambda: 0.0)
    outside.mode = "hangs"
    reconciler = outside.reconcilers(["charge"])["charge"]
    ask(reconciler, _lost_run())
    outside.release()
    before = hung()
    try:
        # when it is asked again
        answer, _ = ask(reconciler, _lost_run())
        # then that call hangs too (a release ends the calls out, not the mode)
        assert answer.answer == "unknown"
        assert hung() == before + 1
    finally:
        outside.release()
