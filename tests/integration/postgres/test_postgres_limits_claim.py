"""PostgreSQL claims under limits counted ahead of the key locks: a claim that counted
before another committed leases of its key checks under the lock and counts again; a
limit of another queue leaves the plain claims alone; racing claimers on their own
handles, with jobs finishing beside them, never hold more than the limit by the audit
trail; a kind held at its cap costs the claims of the other kinds no lock of its key,
and a kind a handle last found spent is not passed over once it has room."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from adapters.postgres import claim as claim_module
from adapters.postgres import open_store
from adapters.postgres.limits import PostgresLimits, lock_id
from fsm import Engine
from fsm.errors import TransientStoreError
from fsm.ports import ScanRequest
from fsm.records import Job, Owner
from fsm.testing.faults_limits import concurrency_breaches, holding_intervals

pytestmark = pytest.mark.postgres

ACTOR, REASON = "limits-claim-test", "claims counted ahead of the key locks"


def _owner(n: int) -> Owner:
    return Owner("host-limits-ahead", 7000 + n, f"inc-{n}")


def _warm(engine: Engine) -> None:
    """One claim of a queue with no jobs: the handle has read the limits since."""
    assert engine.claim(_owner(99), ("warm-up",), limit=1) == []


def test_a_claim_that_counted_before_another_leased_counts_again_under_the_lock(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a kind limited to 3 running and two handles that have read the limit
    first, second = Engine(open_store(pg_schema_url)), Engine(open_store(pg_schema_url))
    try:
        first.submit_many([("ahead", i, {}) for i in range(6)])
        first.set_limit("kind:ahead", concurrency=3, actor=ACTOR, reason=REASON)
        _warm(first)
        _warm(second)
        # when the second leases 3 between the first's count (none held) and its commit
        admit = PostgresLimits.admit_ahead
        raced: list[Any] = []

        def admit_then_race(self: PostgresLimits, *args: Any) -> Any:
            out = admit(self, *args)
            if self is first.store and not raced:
                raced.append(second.claim(_owner(2), limit=3))
            return out

        monkeypatch.setattr(PostgresLimits, "admit_ahead", admit_then_race)
        got = first.claim(_owner(1), limit=3)
        # then the first's check under the lock fails, its count under the lock finds
        # the 3 the second holds, and it leases none: never 6 holding a slot
        assert len(raced[0]) == 3
        assert got == []
        counts = first.counts()
        assert sum(n for (_, state), n in counts.items() if state in ("leased", "running")) == 3
    finally:
        first.store.close()
        second.store.close()


def test_a_limit_of_another_queue_leaves_the_claims_of_this_one_alone(
    pg_schema_url: str,
) -> None:
    engine = Engine(open_store(pg_schema_url))
    try:
        engine.submit_many([("free", i, {}) for i in range(5)])
        engine.set_limit("queue:elsewhere", concurrency=1, actor=ACTOR, reason=REASON)
        assert len(engine.claim(_owner(1), limit=4)) == 4
        assert len(engine.claim(_owner(1), limit=4)) == 1  # and once the handle has read it
    finally:
        engine.store.close()


def _hold_cap(engine: Engine, slots: int, queued: int) -> list[Job]:
    """`queued` jobs of kind `capped` (ahead of any submitted later), the kind limited
    to `slots` running, every slot held by runs another owner started."""
    engine.submit_many([("capped", i, {}) for i in range(queued)])
    engine.set_limit("kind:capped", concurrency=slots, actor=ACTOR, reason=REASON)
    held = engine.claim(_owner(50), limit=slots, kinds=["capped"], start=lambda job: {})
    assert len(held) == slots
    return held


def test_a_claim_beside_a_kind_at_its_cap_takes_no_lock_of_that_kinds_key(
    pg_schema_url: str,
) -> None:
    # given a kind at its cap with jobs queued ahead of 4 jobs of another kind, a
    # handle that has read the limit, and the capped key's lock held by another session
    claimer, setup = Engine(open_store(pg_schema_url)), Engine(open_store(pg_schema_url))
    locker = psycopg.connect(pg_schema_url.split("?", maxsplit=1)[0], autocommit=True)
    got: list[Job] = []
    thread = threading.Thread(target=lambda: got.extend(claimer.claim(_owner(1), limit=4)))
    try:
        _hold_cap(setup, slots=2, queued=10)
        setup.submit_many([("free", i, {}) for i in range(4)])
        _warm(claimer)
        schema = claimer.store.schema  # type: ignore[attr-defined]
        locker.execute("SELECT pg_advisory_lock(%s)", (lock_id(schema, "kind:capped"),))
        # when it claims 4
        thread.start()
        thread.join(timeout=15)
        # then it leases the 4 other jobs without waiting for the capped key's lock
        assert not thread.is_alive(), "the claim waited for the lock of a kind it leases none of"
        assert sorted(j.kind for j in got) == ["free"] * 4
    finally:
        locker.close()  # ends the session: its lock goes, a waiting claim goes on
        if thread.ident is not None:
            thread.join(timeout=30)
        claimer.store.close()
        setup.store.close()


def test_a_kind_the_last_claim_found_spent_is_leased_once_it_has_room(
    pg_schema_url: str,
) -> None:
    # given a kind at its cap and a handle whose last claim found it spent
    claimer, setup = Engine(open_store(pg_schema_url)), Engine(open_store(pg_schema_url))
    try:
        held = _hold_cap(setup, slots=2, queued=6)
        _warm(claimer)
        setup.submit_many([("free", 0, {})])
        # when one run of the kind ends and the handle claims more than is due elsewhere
        setup.succeed(held[0].id, held[0].fence)
        got = claimer.claim(_owner(1), limit=4)
        # then it leases the freed slot's job too, not only the other kind's
        assert sorted(j.kind for j in got) == ["capped", "free"]
    finally:
        claimer.store.close()
        setup.store.close()


def test_claims_beside_a_kind_at_its_cap_never_roll_back(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a kind at its cap and 3,000 jobs of another kind behind it
    claimer, setup = Engine(open_store(pg_schema_url)), Engine(open_store(pg_schema_url))
    rollbacks: list[str] = []
    roll_back = claim_module.roll_back

    def counted(conn: Any) -> None:
        rollbacks.append("claim")
        roll_back(conn)

    monkeypatch.setattr(claim_module, "roll_back", counted)
    try:
        _hold_cap(setup, slots=2, queued=10)
        setup.submit_many([("free", i, {}) for i in range(3000)])
        # when one handle claims and finishes them 16 at a time
        done = 0
        while got := claimer.claim(_owner(1), limit=16, start=lambda job: {}):
            claimer.report_many(
                [(j, "succeed", {"fence": j.fence, "result_json": None}) for j in got]
            )
            done += len(got)
        # then every claim committed at once: none was rolled back and claimed again
        # (the check of a claim under no limit of its jobs once failed as "limits moved
        # since the count 0" in one claim of ten, by a constant the planner evaluated)
        assert done == 3000
        assert rollbacks == []
    finally:
        claimer.store.close()
        setup.store.close()


def test_racing_handles_finishing_jobs_never_hold_more_than_the_limit(
    pg_schema_url: str,
) -> None:
    # given 60 jobs of a kind limited to 4 running, and 4 handles that read the limit
    limit, claimers = 4, 4
    setup = Engine(open_store(pg_schema_url))
    engines = [Engine(open_store(pg_schema_url)) for _ in range(claimers)]
    try:
        ids = [j.id for j in setup.submit_many([("capped", i, {}) for i in range(60)])]
        setup.set_limit("kind:capped", concurrency=limit, actor=ACTOR, reason=REASON)
        for engine in engines:
            _warm(engine)
        errors: list[BaseException] = []
        barrier = threading.Barrier(claimers)

        def work(n: int) -> None:
            engine = engines[n]
            try:
                barrier.wait(timeout=30)
                for _ in range(40):  # claim-and-start, then finish each job at once
                    for job in engine.claim(_owner(n), limit=2, start=lambda job: {}):
                        engine.succeed(job.id, job.fence)
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(claimers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        # then by the audit trail no instant saw more than the limit holding a slot
        intervals = [iv for i in ids for iv in holding_intervals(setup.history(i))]
        assert intervals, "no job was leased"
        assert concurrency_breaches(intervals, lambda at: limit) == []
    finally:
        for engine in (setup, *engines):
            engine.store.close()


@pytest.mark.parametrize("mode", ["deliver_then_drop", "drop"])
def test_a_claim_counted_ahead_whose_connection_broke_at_its_commit(
    pg_proxy: tuple[Any, str], admin: Any, mode: str
) -> None:
    # given a limited kind and a handle that has read the limit (it counts ahead)
    proxy, url = pg_proxy
    engine = Engine(open_store(url))
    try:
        jobs = engine.submit_many([("broken", i, {}) for i in range(3)])
        engine.set_limit("kind:broken", concurrency=2, actor=ACTOR, reason=REASON)
        _warm(engine)
        # when the connection breaks with the claim's last round trip
        proxy.arm(b"COMMIT", mode)
        if mode == "deliver_then_drop":
            # then a commit that went through shows: the jobs run, counted in the total
            got = engine.claim(_owner(1), limit=3, start=lambda job: {})
            assert [j.state for j in got] == ["running", "running"]
            assert admin.one("SELECT leased FROM limits WHERE key = 'kind:broken'") == 2
        else:
            # then one that never arrived leased nothing and added nothing to the total
            with pytest.raises(TransientStoreError):
                engine.claim(_owner(1), limit=3, start=lambda job: {})
            ids = [j.id for j in jobs]
            admin.wait_for("SELECT bool_and(state = 'queued') FROM jobs WHERE id = ANY(%s)", ids)
            assert admin.one("SELECT leased FROM limits WHERE key = 'kind:broken'") == 0
            assert len(engine.claim(_owner(1), limit=3)) == 2
        assert proxy.fired.is_set()
    finally:
        engine.store.close()


def _leased(engine: Engine) -> int:
    return len(engine.scan(ScanRequest(states=("leased",))))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[PostgresLimits]:
    """Spy on the count statements: the handles that sent them, one entry per count."""
    sent = PostgresLimits.send_counts
    calls: list[PostgresLimits] = []

    def spy(self: PostgresLimits, *args: Any) -> Any:
        calls.append(self)
        return sent(self, *args)

    monkeypatch.setattr(PostgresLimits, "send_counts", spy)
    return calls


def test_a_handle_claims_within_its_kept_count_until_it_no_longer_holds_a_claim(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a kind limited to 10 running and a handle that has read the limit
    engine = Engine(open_store(pg_schema_url))
    try:
        engine.submit_many([("kept", i, {}) for i in range(12)])
        engine.set_limit("kind:kept", concurrency=10, actor=ACTOR, reason=REASON)
        _warm(engine)
        counts = _counting(monkeypatch)
        # when it claims 3, 3 and 3 (none ends) and then 3 more
        got = [engine.claim(_owner(1), limit=3) for _ in range(4)]
        # then the first claim counted (10 of room), the next two leased within that
        # count (7, then 4 left), and the fourth, with 1 left, counted again and took 1
        assert [len(g) for g in got] == [3, 3, 3, 1]
        assert len(counts) == 2
        assert _leased(engine) == 10
    finally:
        engine.store.close()


def test_a_kept_count_short_of_a_claim_after_others_leased_is_counted_again_now(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a kind limited to 10 and two handles; the first counted (10 of room) and
    # leased 4, then the second leased 5: the first's kept count has 1 left
    first, second = Engine(open_store(pg_schema_url)), Engine(open_store(pg_schema_url))
    try:
        first.submit_many([("short", i, {}) for i in range(20)])
        first.set_limit("kind:short", concurrency=10, actor=ACTOR, reason=REASON)
        _warm(first)
        _warm(second)
        assert len(first.claim(_owner(1), limit=4)) == 4
        assert len(second.claim(_owner(2), limit=5)) == 5
        counts = _counting(monkeypatch)
        # when the first claims 4, its last read totals saying its count holds 6
        got = first.claim(_owner(1), limit=4)
        # then it finds its count short at the totals it reads, counts now (ahead of
        # the locks, in the same transaction) and leases the one slot left
        assert counts == [first.store]
        assert len(got) == 1
        assert _leased(first) == 10
    finally:
        first.store.close()
        second.store.close()


def test_a_changed_limit_is_counted_again_not_leased_within_the_count_kept(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a handle that counted a limit of 10 and leased 2 within it
    engine = Engine(open_store(pg_schema_url))
    try:
        engine.submit_many([("changed", i, {}) for i in range(12)])
        engine.set_limit("kind:changed", concurrency=10, actor=ACTOR, reason=REASON)
        _warm(engine)
        assert len(engine.claim(_owner(1), limit=2)) == 2
        # when an operator lowers the limit to 3 and the handle claims 3
        engine.set_limit("kind:changed", concurrency=3, actor=ACTOR, reason="lowered")
        counts = _counting(monkeypatch)
        got = engine.claim(_owner(1), limit=3)
        # then it counts under the new limit: one slot left, one leased
        assert counts
        assert len(got) == 1
        assert _leased(engine) == 3
    finally:
        engine.store.close()
