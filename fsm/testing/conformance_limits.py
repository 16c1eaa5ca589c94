"""Conformance of global limits (`fsm.ports.LimitsClaims`, docs/flow-control.md).

Every store that keeps limits is held to the same behaviour: a claim leases no more
jobs of a limited kind or queue than its concurrency allows beside those holding a
slot, and no more than its rate within any window of its period; a job held back
is untouched (queued, its `run_after` and attempt unchanged) and the claim leases
the other kinds behind it; a slot frees when its job leaves leased/running/
cancelling; racing claimers never lease past a limit; bad limits are refused and
change nothing; every change is audited.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import BadInput, OperatorError
from ..ports import LimitsClaims
from ..records import Job, Owner
from .suite_part import SuitePart

#: the owner these checks claim for
LIMITED = Owner(host="host-limits", pid=4343, incarnation="inc-limits")
ACTOR, REASON = "conformance", "limits conformance"


def _kinds(jobs: list[Job]) -> list[str]:
    return sorted(j.kind for j in jobs)


def _no_args(job: Job) -> dict[str, Any]:
    return {}


def _refused(call: Callable[[], object], kind: type[BadInput], words: str) -> None:
    """`call` raises `kind` with a message matching `words` (pytest stays out of fsm/)."""
    refused: BadInput | None = None
    try:
        call()
    except kind as err:
        refused = err
    assert refused is not None, f"accepted: expected {kind.__name__} saying {words!r}"
    assert re.search(words, str(refused)), f"{refused} does not say {words!r}"


#: bad limits and what the refusal says
BAD_LIMITS: list[tuple[dict[str, Any], str]] = [
    ({"concurrency": 0}, "positive integer"),
    ({"concurrency": -1}, "positive integer"),
    ({"concurrency": True}, "positive integer"),
    ({"concurrency": 2.5}, "positive integer"),
    ({"rate": 0, "period": 1.0}, "positive integer"),
    ({"rate": 5, "period": float("nan")}, "finite"),
    ({"rate": 5, "period": float("inf")}, "finite"),
    ({"rate": 5, "period": 0.0009}, "1 ms"),
    ({"rate": 5}, "needs a period"),
    ({}, "give a concurrency"),
]


class LimitsConformance(SuitePart):
    """Mixed into a store's `StoreConformance` tests when the store keeps limits."""

    def _limits(self) -> LimitsClaims:
        store = self.store
        assert isinstance(store, LimitsClaims)
        return store

    def test_a_concurrency_limit_leases_up_to_it_and_the_other_kinds_behind(self) -> None:
        engine, _ = self.engine()
        limited = engine.submit_many([("conformance", i, {"priority": i}) for i in range(6)])
        others = engine.submit_many([("unsafe", i, {"priority": 9}) for i in range(3)])
        engine.set_limit("kind:conformance", concurrency=2, actor=ACTOR, reason=REASON)
        got = engine.claim(LIMITED, limit=10)
        assert _kinds(got) == ["conformance"] * 2 + ["unsafe"] * 3
        assert [j.id for j in got if j.kind == "conformance"] == [j.id for j in limited[:2]]
        assert engine.claim(LIMITED, limit=10) == []
        for job in limited[2:]:  # held back: untouched, not charged an attempt
            assert self.store.get(job.id) == job
            assert [e.event for e in self.store.history(job.id)] == ["submit"]
        assert {j.id for j in others} <= {j.id for j in got}

    def test_claim_and_start_obeys_the_limit_too(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(5)])
        engine.set_limit("kind:conformance", concurrency=3, actor=ACTOR, reason=REASON)
        started = engine.claim(LIMITED, limit=5, start=_no_args)
        assert [j.state for j in started] == ["running"] * 3
        assert engine.claim(LIMITED, limit=5, start=_no_args) == []

    def test_a_slot_frees_only_when_its_job_leaves_the_held_states(self) -> None:
        engine, clock = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(4)])
        engine.set_limit("kind:conformance", concurrency=2, actor=ACTOR, reason=REASON)
        first, second = engine.claim(LIMITED, limit=4)
        running = engine.start(first.id, first.fence)
        assert engine.claim(LIMITED, limit=4) == []  # leased and running hold slots
        engine.cancel(running.id, actor="op", reason="stop it")  # cancelling holds one
        assert self.store.get(running.id).state == "cancelling"  # type: ignore[union-attr]
        assert engine.claim(LIMITED, limit=4) == []
        clock.advance(engine.policy.lease.ttl + 1.0)
        engine.expire(second.id)  # a lost lease before start: back to queued, slot free
        assert len(engine.claim(LIMITED, limit=4)) == 1
        engine.cancelled_ack(running.id, running.fence)
        assert len(engine.claim(LIMITED, limit=4)) == 1
        assert engine.claim(LIMITED, limit=4) == []

    def test_a_queue_limit_counts_every_kind_of_the_queue(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {"queue": "q1"}) for i in range(3)])
        engine.submit_many([("unsafe", i, {"queue": "q1"}) for i in range(3)])
        engine.submit_many([("conformance", i, {"queue": "q2"}) for i in range(2)])
        engine.set_limit("queue:q1", concurrency=4, actor=ACTOR, reason=REASON)
        got = engine.claim(LIMITED, queues=("q1", "q2"), limit=10)
        assert sorted(j.queue for j in got) == ["q1"] * 4 + ["q2"] * 2

    def test_a_rate_limit_holds_every_window_of_its_period(self) -> None:
        engine, clock = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(10)])
        engine.submit_many([("unsafe", i, {"priority": 5}) for i in range(2)])
        engine.set_limit("kind:conformance", rate=3, period=10.0, actor=ACTOR, reason=REASON)
        got = engine.claim(LIMITED, limit=10)
        assert _kinds(got) == ["conformance"] * 3 + ["unsafe"] * 2
        clock.advance(9.999)
        assert engine.claim(LIMITED, limit=10) == []  # the window still holds 3
        clock.advance(0.001)  # 10 s after the first leases: they leave the window
        assert _kinds(engine.claim(LIMITED, limit=10)) == ["conformance"] * 3
        clock.advance(5.0)
        assert engine.claim(LIMITED, limit=10) == []

    def test_a_held_back_job_keeps_its_run_after_and_attempts(self) -> None:
        engine, clock = self.engine()
        job, *waiting = engine.submit_many([("conformance", i, {"priority": i}) for i in range(3)])
        engine.set_limit("kind:conformance", rate=1, period=60.0, actor=ACTOR, reason=REASON)
        assert [j.id for j in engine.claim(LIMITED, limit=5)] == [job.id]
        for _ in range(3):
            clock.advance(1.0)
            assert engine.claim(LIMITED, limit=5) == []
        for before in waiting:
            after = self.store.get(before.id)
            assert after == before  # run_after, attempt, version unchanged

    def test_lowering_a_limit_below_the_running_lets_them_finish_and_waits(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(5)])
        engine.set_limit("kind:conformance", concurrency=3, actor=ACTOR, reason=REASON)
        held = engine.claim(LIMITED, limit=5, start=_no_args)
        assert len(held) == 3
        engine.set_limit("kind:conformance", concurrency=1, actor=ACTOR, reason=REASON)
        assert engine.claim(LIMITED, limit=5) == []
        for job in held[:2]:
            engine.succeed(job.id, job.fence)
            assert engine.claim(LIMITED, limit=5) == []  # 2 then 1 still hold a slot
        engine.succeed(held[2].id, held[2].fence)
        assert len(engine.claim(LIMITED, limit=5)) == 1

    def test_a_workers_own_caps_hold_beside_the_global_limits(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(4)])
        engine.submit_many([("unsafe", i, {"priority": 1}) for i in range(2)])
        got = engine.claim(LIMITED, limit=10, caps={"kind:conformance": 1})
        assert _kinds(got) == ["conformance", "unsafe", "unsafe"]

    def test_racing_claimers_never_lease_past_a_limit(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(40)])
        engine.set_limit(
            "kind:conformance", concurrency=3, rate=5, period=3600.0, actor=ACTOR, reason=REASON
        )
        leased: list[Job] = []
        lock = threading.Lock()
        barrier = threading.Barrier(self.concurrent_threads)

        def claimer(n: int) -> None:
            barrier.wait()
            for _ in range(3):
                got = engine.claim(Owner("host-limits", 5000 + n, f"inc-{n}"), limit=2)
                with lock:
                    leased.extend(got)

        threads = [
            threading.Thread(target=claimer, args=(n,)) for n in range(self.concurrent_threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(leased) == 3
        for job in leased:  # a finished job frees its slot, the rate still caps
            engine.start(job.id, job.fence)
            engine.succeed(job.id, job.fence)
        assert len(engine.claim(LIMITED, limit=10)) == 2
        assert engine.claim(LIMITED, limit=10) == []

    def test_a_bad_limit_is_refused_by_name_and_changes_nothing(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", 0, {})])
        engine.set_limit("kind:conformance", concurrency=4, actor=ACTOR, reason=REASON)
        before = (self._limits().limits(), self._limits().limit_changes())
        limit = engine.set_limit
        for args, words in BAD_LIMITS:
            call = partial(limit, "kind:conformance", actor=ACTOR, reason=REASON, **args)
            _refused(call, BadInput, words)
        assert (self._limits().limits(), self._limits().limit_changes()) == before

    def test_unknown_kinds_bad_keys_and_missing_reasons_are_refused(self) -> None:
        engine, _ = self.engine()
        limit = engine.set_limit
        _refused(
            lambda: limit("kind:nosuch", concurrency=1, actor=ACTOR, reason=REASON),
            BadInput,
            "unknown kind",
        )
        _refused(
            lambda: limit("host:x", concurrency=1, actor=ACTOR, reason=REASON),
            BadInput,
            "kind or a queue",
        )
        _refused(
            lambda: limit("conformance", concurrency=1, actor=ACTOR, reason=REASON),
            BadInput,
            "'kind:NAME'",
        )
        _refused(
            lambda: limit("queue:default", concurrency=1, actor="op", reason=" "),
            OperatorError,
            "reason",
        )
        assert self._limits().limits() == {}
        assert self._limits().limit_changes() == []
        engine.set_limit("kind:nosuch", concurrency=1, new_kind=True, actor=ACTOR, reason=REASON)
        assert list(self._limits().limits()) == ["kind:nosuch"]

    def test_every_change_is_audited_and_clear_frees_the_kind(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(3)])
        engine.set_limit("kind:conformance", concurrency=1, actor="ann", reason="vendor cap")
        engine.set_limit(
            "kind:conformance", concurrency=2, rate=9, period=1.0, actor="bob", reason="raised"
        )
        assert len(engine.claim(LIMITED, limit=5)) == 2
        assert engine.clear_limit("kind:conformance", actor="cy", reason="vendor fixed")
        assert engine.clear_limit("kind:conformance", actor="cy", reason="again") is None
        assert len(engine.claim(LIMITED, limit=5)) == 1
        changes = self._limits().limit_changes("kind:conformance")
        assert [(c.actor, c.reason, c.before, c.after) for c in changes] == [
            ("cy", "vendor fixed", "2 running, 9 per 1s", None),
            ("bob", "raised", "1 running", "2 running, 9 per 1s"),
            ("ann", "vendor cap", None, "1 running"),
        ]
        assert self._limits().limits() == {}

    def test_status_counts_the_jobs_holding_a_slot_and_waiting(self) -> None:
        engine, _ = self.engine()
        engine.submit_many([("conformance", i, {}) for i in range(5)])
        engine.set_limit("kind:conformance", concurrency=2, actor=ACTOR, reason=REASON)
        engine.claim(LIMITED, limit=5)
        (status,) = engine.limits()
        assert (status.limit.key, status.holding, status.waiting) == ("kind:conformance", 2, 3)
