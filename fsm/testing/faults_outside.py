"""The fault suite's outside system and its reconciler (used by `faults_machine`).

A handler of a kind that marks its outside calls marks first and only then commits
its fenced outside effect (the machine's `effects` table: job -> fences committed).
The reconciler the recovery sweep calls answers from that table: truthfully (done
when an effect was committed under a fence the lost attempt marked with, else
not_started), or, as a rule of the machine chooses, unknown, raising, returning
nonsense, still_running, or hanging past its timeout. With a truthful reconciler the
suite's I7 check (a not-retry-safe job's effect commits at most once per operator
requeue) must hold; with the others the job may only end in investigate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..service.reconcile import LostRun, Reconciler, done, not_started, still_running, unknown

#: what the machine's reconciler may do; "truthful" twice, so it is drawn most often
MODES = ("truthful", "truthful", "unknown", "raises", "garbage", "still_running", "hangs")
#: what the reconciler does when the machine's `lose_marked_run` loses a marked run:
#: the answers and the failures `fsm.service.reconcile.ask` must read as unknown (raising and
#: nonsense). Hanging is left to `reconciler_behaves`: its thread outlives the step
#: and counts against `fsm.service.reconcile.MAX_HUNG`, shared by the whole process.
LOSS_MODES = ("truthful", "raises", "garbage", "unknown", "still_running")
#: a hanging reconciler's timeout, and how long it hangs (real seconds: kept tiny)
HANG_TIMEOUT = 0.02
HANG_FOR = 0.1
#: the timeout of every other mode: generous, so a loaded machine never reads a prompt
#: answer as a hang (hypothesis needs each step to go the same way when replayed)
ANSWER_TIMEOUT = 30.0


class OutsideSystem:
    """The reconciler's view of the outside effects, and its current behaviour."""

    def __init__(self, effects: Mapping[str, list[int]], now: Callable[[], float]) -> None:
        self.effects = effects
        self.now = now
        self.mode = "truthful"
        self.asked = 0

    def answer(self, run: LostRun) -> Any:
        self.asked += 1
        mode = self.mode
        if mode == "raises":
            raise ConnectionError("outside system unreachable")
        if mode == "garbage":
            return {"status": "paid"}
        if mode == "unknown":
            return unknown("the outside system cannot tell")
        if mode == "still_running":
            return still_running(until=self.now() + 10.0)
        if mode == "hangs":
            time.sleep(HANG_FOR)
            return done()
        marked = {m.fence for m in run.marks}
        committed = any(f in marked for f in self.effects.get(run.job.id, []))
        return done({"reconciled": True}) if committed else not_started()

    def reconcilers(self, kinds: list[str]) -> dict[str, Reconciler]:
        timeout = HANG_TIMEOUT if self.mode == "hangs" else ANSWER_TIMEOUT
        return {kind: Reconciler(self.answer, timeout=timeout) for kind in kinds}
