"""Conformance of unique submits (`fsm.inputs.Unique`, docs/uniqueness.md).

A store adds this suite to its tests::

    class TestMyStore(UniqueConformance, SharedStoreConformance): ...

It checks, through the engine, that a submit whose scope holds a job of its kind and
key returns that job (or, refusing, raises `DuplicateJob` naming it and writes
nothing), in every state of the scope and in none outside it; that a time window ends
exactly `period` after the job was created; that a batch treats its own earlier jobs
as candidates and a refused item writes none of the batch; that bad scopes are refused
before any write; and that threads racing on the same keys leave one job per key.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import BadInput, DuplicateJob
from ..inputs import Unique
from ..lifecycle.spec import lifecycle
from ..lifecycle.unique import live_states
from ..records import Job
from .conformance import PATHS, StoreConformance, reach

#: the states `reach` can put a job in, final ones included
_REACHABLE = tuple(s for s in PATHS if ":" not in s)


E = TypeVar("E", bound=BaseException)


def _raised(kind: type[E], call: Callable[[], object]) -> E:
    """The `kind` error `call` raised; AssertionError if it raised none."""
    try:
        call()
    except kind as err:
        return err
    raise AssertionError(f"expected {kind.__name__}, nothing was raised")


class UniqueConformance(StoreConformance):
    """A unique submit returns (or refuses) the job its scope holds, atomically."""

    unique_threads: int = 16

    def _total(self) -> int:
        return sum(self.store.counts().values())

    def test_a_unique_submit_returns_the_job_in_every_live_state(self) -> None:
        engine, clock = self.engine()
        for state in live_states(lifecycle()):
            first = reach(engine, clock, state, unique=f"key-{state}")
            total = self._total()

            again = engine.submit("conformance", {"n": 2}, unique=f"key-{state}")

            assert again.id == first.id, f"a duplicate of a {state} job was stored anew"
            assert again.state == state
            assert again.unique_key == f"key-{state}"
            assert self._total() == total

    def test_a_job_outside_the_scope_lets_a_new_one_in(self) -> None:
        engine, clock = self.engine()
        for state in sorted(set(_REACHABLE) - set(live_states(lifecycle()))):
            first = reach(engine, clock, state, unique=f"done-{state}")

            again = engine.submit("conformance", {"n": 2}, unique=f"done-{state}")

            assert again.id != first.id, f"a {state} job held the default (live) scope"
            stored = self.store.get(again.id)
            assert stored is not None
            assert stored.state == "queued"

    def test_a_scope_with_a_final_state_holds_the_job_in_it(self) -> None:
        engine, clock = self.engine()
        scope = Unique("paid", states=(*live_states(lifecycle()), "succeeded"))
        first = reach(engine, clock, "succeeded", unique=scope)
        failed = reach(engine, clock, "failed", unique=Unique("lost", states=scope.states))

        assert engine.submit("conformance", {}, unique=scope).id == first.id
        assert engine.submit("conformance", {}, unique=Unique("lost")).id != failed.id

    def test_kinds_have_scopes_of_their_own(self) -> None:
        engine, _ = self.engine()
        a = engine.submit("conformance", {}, unique="shared")
        b = engine.submit("unsafe", {}, unique="shared")

        assert a.id != b.id
        assert engine.submit("unsafe", {}, unique="shared").id == b.id

    def test_a_time_window_ends_exactly_period_after_the_job_was_created(self) -> None:
        engine, clock = self.engine()
        hourly = Unique("report", period=3600.0)
        first = engine.submit("conformance", {}, unique=hourly)
        engine.cancel(first.id, actor="tester", reason="a window holds final states too")

        clock.advance(3599.5)
        assert engine.submit("conformance", {}, unique=hourly).id == first.id
        clock.advance(0.5)  # exactly `period` later: the window is (now - period, now]
        second = engine.submit("conformance", {}, unique=hourly)

        assert second.id != first.id
        assert engine.submit("conformance", {}, unique=hourly).id == second.id

    def test_a_refusing_submit_names_the_job_and_writes_nothing(self) -> None:
        engine, clock = self.engine()
        first = reach(engine, clock, "running", unique="invoice-7")
        total = self._total()
        refuse = Unique("invoice-7", on_duplicate="refuse")

        err = _raised(DuplicateJob, lambda: engine.submit("conformance", {}, unique=refuse))

        assert err.job.id == first.id
        assert first.id in str(err)
        assert "running" in str(err)
        assert self._total() == total

    def test_a_batch_sees_its_own_earlier_jobs_and_a_refusal_writes_none_of_it(self) -> None:
        engine, _ = self.engine()
        jobs = engine.submit_many(
            [
                ("conformance", {"n": 1}, {"unique": "b-1"}),
                ("conformance", {"n": 2}, {"unique": "b-1"}),
                ("conformance", {"n": 3}, {"unique": "b-2"}),
            ]
        )
        assert jobs[0].id == jobs[1].id != jobs[2].id
        total = self._total()

        refused: list[tuple[str, Any, dict[str, Any]]] = [
            ("conformance", {}, {"unique": "b-3"}),
            ("conformance", {}, {"unique": {"key": "b-2", "on_duplicate": "refuse"}}),
        ]
        err = _raised(DuplicateJob, lambda: engine.submit_many(refused))

        assert err.job.id == jobs[2].id
        assert self._total() == total
        assert engine.submit("conformance", {}, unique="b-3").id not in {j.id for j in jobs}

    def test_the_idempotency_key_is_checked_first_and_kept_forever(self) -> None:
        engine, clock = self.engine()
        first = reach(engine, clock, "succeeded", unique="u", idempotency_key="i")

        again = engine.submit("conformance", {}, unique="u", idempotency_key="i")
        fresh = engine.submit("conformance", {}, unique="u")

        assert again.id == first.id
        assert fresh.id != first.id

    def test_in_a_batch_a_used_idempotency_key_wins_and_holds_no_unique_key(self) -> None:
        engine, _ = self.engine()
        first = engine.submit("conformance", {}, idempotency_key="i-1", unique="u-1")
        engine.cancel(first.id, actor="tester", reason="free u-1")

        jobs = engine.submit_many(
            [
                ("conformance", {}, {"idempotency_key": "i-1", "unique": "u-2"}),
                ("conformance", {}, {"unique": "u-2"}),
                ("conformance", {}, {"unique": "u-2"}),
            ]
        )

        assert jobs[0].id == first.id  # the idempotency key's job, whatever its scope
        assert jobs[1].id != first.id
        assert jobs[2].id == jobs[1].id
        stored = self.store.get(jobs[1].id)
        assert stored is not None, "a batch returned a job it never stored"
        assert stored.unique_key == "u-2"

    def test_bad_unique_options_are_refused_before_any_write(self) -> None:
        engine, _ = self.engine()
        engine.submit("conformance", {}, unique="k")
        total = self._total()
        bad: list[Any] = [
            "",
            {"key": ""},
            {"states": ["queued"]},
            {"key": "k", "states": ["queued"]},
            {"key": "k", "states": ["succeeded", "failed"]},
            {"key": "k", "states": ["nope"]},
            {"key": "k", "states": []},
            {"key": "k", "states": "queued"},
            {"key": "k", "period": 0},
            {"key": "k", "period": -1},
            {"key": "k", "period": float("inf")},
            {"key": "k", "period": float("nan")},
            {"key": "k", "period": 0.0001},
            {"key": "k", "on_duplicate": "ignore"},
            {"key": "k", "scope": "x"},
            42,
        ]
        for value in bad:
            batch: list[tuple[str, Any, dict[str, Any]]] = [
                ("conformance", {}, {}),
                ("conformance", {}, {"unique": value}),
            ]
            err = _raised(
                BadInput, functools.partial(engine.submit, "conformance", {}, unique=value)
            )
            assert "unique" in str(err), f"{value!r}: {err} does not name the option"
            _raised(BadInput, functools.partial(engine.submit_many, batch))
        assert self._total() == total

    def test_threads_racing_on_the_same_keys_leave_one_job_per_key(self) -> None:
        engine, _ = self.engine()
        keys = [f"race-{i}" for i in range(4)]
        got: list[list[Job]] = []
        errors: list[BaseException] = []
        start = threading.Barrier(self.unique_threads)

        def submitter(n: int) -> None:
            try:
                start.wait()
                mine = []
                for round_ in range(3):
                    for key in keys[n % 2 :] + keys[: n % 2]:
                        mine.append(engine.submit("conformance", {"n": n, "r": round_}, unique=key))
                got.append(mine)
            except BaseException as err:  # the assertion below reports it
                errors.append(err)

        threads = [
            threading.Thread(target=submitter, args=(n,)) for n in range(self.unique_threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert not errors, errors
        by_key: dict[str, set[str]] = {}
        for job in (j for mine in got for j in mine):
            by_key.setdefault(str(job.unique_key), set()).add(job.id)
        assert {k: len(v) for k, v in by_key.items()} == dict.fromkeys(keys, 1)
        assert self._total() == len(keys)
