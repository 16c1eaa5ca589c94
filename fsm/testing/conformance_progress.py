"""Conformance of a store's progress capability (`fsm.ports.StoresProgress`).

A store that keeps running jobs' latest progress adds this suite to its tests::

    class TestMyStore(ProgressStoreConformance, SharedStoreConformance): ...

It checks that `save_progress` writes only where the lease still matches (owner,
fence, state), bumps no version and appends no audit entry; that a decision made
on a record read before a progress write (a report racing its own heartbeat) never
writes the progress back to an older value, alone or in a batch of decisions that
change different columns; and that `erase` removes the progress with the result.
"""

from __future__ import annotations

from ..lifecycle.core import decide
from ..ports import Erasable, StoresProgress
from ..records import Job
from ..service.progress import envelope, progress_of
from .conformance import StoreConformance, owner, reach


class ProgressStoreConformance(StoreConformance):
    """`save_progress`: fenced, no version bump, no audit entry, never undone."""

    def _save(self, job: Job, value: str, *, fence: int | None = None, who: str = "a") -> list[str]:
        engine, _ = self.engine()
        text = envelope(job, value, 1.0)
        return engine.save_progress(
            owner(who), {job.id: (job.fence if fence is None else fence, text)}
        )

    def test_the_store_declares_the_progress_capability(self) -> None:
        assert isinstance(self.store, StoresProgress)

    def test_save_progress_writes_a_held_job_without_a_version_bump_or_audit_entry(self) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running")
        before = len(self.store.history(running.id))

        written = self._save(running, '{"done":3}')

        stored = self.store.get(running.id)
        assert written == [running.id]
        assert stored is not None
        assert stored.version == running.version
        assert stored.state == "running"
        got = progress_of(stored)
        assert got is not None
        assert (got.value, got.attempt, got.fence) == ({"done": 3}, 1, running.fence)
        assert len(self.store.history(running.id)) == before

    def test_save_progress_with_a_stale_fence_another_owner_or_no_lease_changes_nothing(
        self,
    ) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running")
        queued = reach(engine, clock, "queued")
        finished = reach(engine, clock, "succeeded")

        stale = self._save(running, '{"done":1}', fence=running.fence - 1)
        stranger = self._save(running, '{"done":2}', who="z")
        not_held = self._save(queued, '{"done":3}')
        ended = self._save(finished, '{"done":4}', fence=finished.fence)

        assert (stale, stranger, not_held, ended) == ([], [], [], [])
        for job in (running, queued, finished):
            assert self.store.get(job.id) == job

    def test_save_progress_writes_a_cancelling_job_and_the_newest_value_wins(self) -> None:
        engine, clock = self.engine()
        job = reach(engine, clock, "cancelling")
        self._save(job, '{"done":1}')
        self._save(job, '{"done":2}')
        stored = self.store.get(job.id)
        assert stored is not None
        got = progress_of(stored)
        assert got is not None
        assert got.value == {"done": 2}

    def test_a_decision_on_a_record_read_before_a_progress_write_keeps_the_progress(
        self,
    ) -> None:
        engine, clock = self.engine()
        first = reach(engine, clock, "running")
        second = reach(engine, clock, "running")
        now = clock.now()
        # decided on the records as read, then the owner stores progress of both
        succeed = decide(first, "succeed", now, engine.policy, fence=first.fence, result_json="1")
        fail = decide(second, "fail", now, engine.policy, fence=second.fence, error="boom")
        self._save(first, '{"done":7}')
        self._save(second, '{"done":8}')

        # one batch whose decisions change different columns (a store may write whole rows)
        written = self.store.apply([succeed, fail])

        assert [getattr(w, "state", None) for w in written] == ["succeeded", "retry_wait"]
        for job, done in ((first, 7), (second, 8)):
            stored = self.store.get(job.id)
            assert stored is not None
            got = progress_of(stored)
            assert got is not None, f"the progress of {job.id} was written back"
            assert got.value == {"done": done}

    def test_erase_removes_the_progress_with_the_result(self) -> None:
        engine, clock = self.engine()
        running = reach(engine, clock, "running")
        self._save(running, '{"card":"4242"}')
        engine.succeed(running.id, running.fence, {"ok": True})
        if not isinstance(self.store, Erasable):
            return
        erased = engine.erase(running.id, actor="ops", reason="GDPR request")
        stored = self.store.get(running.id)
        assert erased.progress_json is None
        assert stored is not None
        assert stored.progress_json is None
