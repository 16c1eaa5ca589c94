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

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..service.reconcile import (
    LostRun,
    Reconciler,
    done,
    hung,
    not_started,
    still_running,
    unknown,
)

#: what the machine's reconciler may do; "truthful" twice, so it is drawn most often
MODES = ("truthful", "truthful", "unknown", "raises", "garbage", "still_running", "hangs")
#: what the reconciler does when the machine's `lose_marked_run` loses a marked run:
#: the answers and the failures `fsm.service.reconcile.ask` must read as unknown (raising and
#: nonsense). Hanging is left to `reconciler_behaves`: its thread outlives its timeout
#: and counts against `fsm.service.reconcile.MAX_HUNG`, shared by the whole process.
LOSS_MODES = ("truthful", "raises", "garbage", "unknown", "still_running")
#: of LOSS_MODES, those whose answer `ask` must read as unknown (the job is never made
#: due again by it: investigate, or left for a later pass)
UNKNOWN_ANSWERS = ("raises", "garbage", "unknown")
#: a hanging reconciler's timeout (real seconds: kept tiny)
HANG_TIMEOUT = 0.02
#: a hanging call lasts until the machine ends it (`release`, after every step and
#: before every settling sweep), at most this long: never by the wall clock, or the
#: count of hung threads a later sweep reads (against MAX_HUNG) would depend on how
#: fast the steps ran, and a replay could take another path (hypothesis's Flaky: 3 of
#: 35 default runs of a study under load failed so, when a hang lasted 0.1 s)
HANG_BOUND = 30.0
#: how long `release` waits for the released threads to end
RELEASE_WAIT = 5.0
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
        #: the runs asked about, each with the truthful answer's word (None: another
        #: mode answered); the machine checks them against the trail (`drain`)
        self.asks: list[tuple[LostRun, str | None]] = []
        self._released = threading.Event()

    def drain(self) -> list[tuple[LostRun, str | None]]:
        """The runs asked about since the last drain."""
        asks, self.asks = self.asks, []
        return asks

    def answer(self, run: LostRun, *, hangs: bool = False) -> Any:
        self.asked += 1
        truthful = not hangs and self.mode == "truthful"
        said = self._answer(run, hangs=hangs)
        self.asks.append((run, said.answer if truthful else None))
        return said

    def _answer(self, run: LostRun, *, hangs: bool) -> Any:
        if hangs:  # built while the reconciler hung: past its timeout, until released
            self._released.wait(HANG_BOUND)
            return done()
        mode = self.mode
        if mode == "raises":
            raise ConnectionError("outside system unreachable")
        if mode == "garbage":
            return {"status": "paid"}
        if mode == "unknown":
            return unknown("the outside system cannot tell")
        if mode == "still_running":
            return still_running(until=self.now() + 10.0)
        if mode == "hangs":  # a call of one built before: within its long timeout
            return done()
        marked = {m.fence for m in run.marks}
        committed = any(f in marked for f in self.effects.get(run.job.id, []))
        return done({"reconciled": True}) if committed else not_started()

    def release(self) -> None:
        """End every hanging call, and wait (at most RELEASE_WAIT) until the process has
        no reconciler thread hung past its timeout; calls that hang later wait again.
        The next calls get a new event only once the hung threads ended: a thread that
        started late still finds this one set."""
        self._released.set()
        deadline = time.monotonic() + RELEASE_WAIT
        while hung() and time.monotonic() < deadline:
            time.sleep(0.001)
        self._released = threading.Event()

    def reconcilers(self, kinds: list[str]) -> dict[str, Reconciler]:
        """The kinds' reconcilers as the mode is now: built while it hangs, a reconciler
        has the tiny timeout and every call of it hangs (whatever the mode when it is
        called, as a held call may be called steps later); built otherwise, it has the
        generous timeout, so a prompt answer is never read as a hang."""
        hangs = self.mode == "hangs"
        timeout = HANG_TIMEOUT if hangs else ANSWER_TIMEOUT
        answer = functools.partial(self.answer, hangs=hangs)
        return {kind: Reconciler(answer, timeout=timeout) for kind in kinds}
