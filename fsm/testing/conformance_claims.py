"""Conformance of claim-and-start (`ClaimRequest.start`): part of every `StoreConformance`.

A worker claims a batch and starts it in the same store transaction: each job is
written from its pre-image to running, with its `lease` and its `start` audit
entries, under one commit. These checks hold every store to that: the records and
trails it returns are what it stores; a job whose start the core refuses stays
leased alone while the rest of its batch starts; claims by ids and racing claimers
start each job exactly once.
"""

from __future__ import annotations

import threading
from typing import Any

from ..records import Job, Owner
from .suite_part import SuitePart

#: the owner these checks claim for
CLAIMER = Owner(host="host-claims", pid=4242, incarnation="inc-claims")


def _no_args(job: Job) -> dict[str, Any]:
    return {}


class ClaimStartConformance(SuitePart):
    """Mixed into `fsm.testing.conformance.StoreConformance` (which gives `store`, `engine`)."""

    def _trail(self, job_id: str) -> list[str]:
        return [e.event for e in self.store.history(job_id)]

    def test_claim_and_start_writes_each_job_running_with_both_audit_entries(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many([("conformance", i, {"priority": i}) for i in range(6)])
        started = engine.claim(CLAIMER, limit=4, start=_no_args)
        assert [j.id for j in started] == [j.id for j in jobs[:4]]
        for before, job in zip(jobs, started, strict=False):
            assert (job.state, job.fence, job.owner) == ("running", 1, CLAIMER)
            assert job.version == before.version + 2  # a lease and a start, one write
            assert job.attempt == 1
            assert self.store.get(job.id) == job
            trail = self.store.history(job.id)
            assert [e.event for e in trail] == ["submit", "lease", "start"]
            assert [(e.from_state, e.to_state) for e in trail[1:]] == [
                ("queued", "leased"),
                ("leased", "running"),
            ]
            assert [e.version for e in trail[1:]] == [before.version + 1, before.version + 2]
        for job in jobs[4:]:
            assert self.store.get(job.id) == job  # untouched
        # a started job reports as any other: it succeeds under its fence
        done = engine.succeed(started[0].id, started[0].fence, {"ok": True})
        assert done.state == "succeeded"

    def test_a_job_whose_start_is_refused_stays_leased_alone(self) -> None:
        engine, _ = self.engine()
        a, b, c = engine.submit_many([("conformance", i, {"priority": i}) for i in range(3)])

        def args(job: Job) -> dict[str, Any]:
            if job.id == b.id:
                raise ValueError("this one cannot start here")
            return {}

        got = {j.id: j for j in engine.claim(CLAIMER, limit=3, start=args)}
        assert [got[x.id].state for x in (a, b, c)] == ["running", "leased", "running"]
        for job in got.values():
            assert self.store.get(job.id) == job
        assert self._trail(b.id) == ["submit", "lease"]
        assert self._trail(a.id) == self._trail(c.id) == ["submit", "lease", "start"]
        # the caller starts it on its own, as before claim-and-start
        assert engine.start(b.id, got[b.id].fence).state == "running"

    def test_claim_and_start_by_ids_starts_exactly_those_that_are_claimable(self) -> None:
        engine, _ = self.engine()
        a, b, c = engine.submit_many([("conformance", i, {}) for i in range(3)])
        (held,) = engine.claim(CLAIMER, ids=[c.id])
        got = engine.claim(CLAIMER, ids=[b.id, c.id, "missing", b.id], limit=10, start=_no_args)
        assert [(j.id, j.state) for j in got] == [(b.id, "running")]
        assert self.store.get(a.id) == a
        assert self.store.get(c.id) == held
        assert self._trail(c.id) == ["submit", "lease"]

    def test_an_explicit_retry_safe_false_is_pinned_on_the_stored_job(self) -> None:
        # given jobs of a kind the submitter has no policy for: said False, said
        # nothing (stored fail-closed), said True
        engine, _ = self.engine()
        said_false = engine.submit("stranger", 1, retry_safe=False)
        silent = engine.submit("stranger", 2)
        said_true = engine.submit("stranger", 3, retry_safe=True)
        # then only the explicit False is pinned, and the store reads back what it wrote
        assert [(j.retry_safe, j.retry_safe_pinned) for j in (said_false, silent, said_true)] == [
            (False, True),
            (False, False),
            (True, False),
        ]
        for job in (said_false, silent, said_true):
            assert self.store.get(job.id) == job

    def test_claim_and_start_stamps_the_handlers_retry_safe_unless_the_submitter_pinned(
        self,
    ) -> None:
        # given two jobs stored fail-closed, one of them said retry_safe=False explicitly
        engine, _ = self.engine()
        loose = engine.submit("stranger", 1, priority=1)
        pinned = engine.submit("stranger", 2, priority=2, retry_safe=False)

        def handler_policy(job: Job) -> dict[str, Any]:
            return {"kind_policy": {"retry_safe": True}}

        # when a worker whose handler is retry-safe claims and starts both
        got = {j.id: j for j in engine.claim(CLAIMER, limit=2, start=handler_policy)}
        # then its policy is stamped on the first, durable with the start, and not the second
        assert (got[loose.id].retry_safe, got[pinned.id].retry_safe) == (True, False)
        for job in got.values():
            assert self.store.get(job.id) == job
        stamped = self.store.history(loose.id)[-1].data["effective_policy"]
        kept = self.store.history(pinned.id)[-1].data["effective_policy"]
        assert (stamped["retry_safe"], kept["retry_safe"], kept["retry_safe_pinned"]) == (
            True,
            False,
            True,
        )

    def test_racing_claim_and_start_starts_every_job_exactly_once(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many([("conformance", i, {}) for i in range(120)])
        seen: list[Job] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def claimer() -> None:
            try:
                while True:
                    got = engine.claim(CLAIMER, limit=7, start=_no_args)
                    if not got:
                        return
                    with lock:
                        seen.extend(got)
            except BaseException as err:  # reported below, not lost in the thread
                errors.append(err)

        threads = [threading.Thread(target=claimer) for _ in range(self.concurrent_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert sorted(j.id for j in seen) == sorted(j.id for j in jobs)
        for job in seen:
            assert job.state == "running"
            assert self._trail(job.id) == ["submit", "lease", "start"]
