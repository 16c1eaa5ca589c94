"""The worker's per-run bookkeeping made cheaper for #38 keeps its behaviour: a run's
lazily built cancel token acts as a `threading.Event`, and the reporter's batched
calls on the run table keep the counts the claim loop reads."""

from __future__ import annotations

import threading

from fsm.records import Job
from fsm.service.identity import current
from fsm.worker.runs import Run, Runs, Token


def _job(n: int, fence: int = 1) -> Job:
    return Job(
        id=f"worker-cpu-{n}", kind="k", queue="q", payload_json="{}", state="running",
        created_at=0.0, updated_at=0.0, run_after=0.0, fence=fence,
    )  # fmt: skip


def test_a_token_is_an_event_whose_waiter_wakes_when_another_thread_sets_it() -> None:
    # given a token nobody has set or waited on
    token = Token()
    assert isinstance(token, threading.Event)
    assert not token.is_set()
    assert token.wait(0.01) is False
    # when another thread sets it while this one waits
    threading.Timer(0.05, token.set).start()
    # then the wait returns True, and clear() makes it unset again
    assert token.wait(5.0) is True
    assert token.is_set()
    token.clear()
    assert not token.is_set()


def test_a_token_set_before_any_wait_is_seen_by_the_first_wait() -> None:
    token = Token()
    token.set()
    assert token.wait(0) is True


def test_many_waiters_on_a_fresh_token_all_wake_on_one_set() -> None:
    # given eight threads waiting at once on a token none of them built a condition for
    token = Token()
    woke: list[bool] = []
    threads = [threading.Thread(target=lambda: woke.append(token.wait(5.0))) for _ in range(8)]
    for t in threads:
        t.start()
    # when it is set
    token.set()
    for t in threads:
        t.join(5.0)
    # then every waiter saw it
    assert woke == [True] * 8


def test_batched_reporting_and_finishing_keep_the_counts_and_drop_the_held_runs() -> None:
    # given three runs in the table, held by the identity, whose handlers returned
    identity = current()
    runs = Runs(identity)
    table = [Run(_job(n), None) for n in range(3)]
    identity.hold_many([r.key for r in table])
    for run in table:
        runs.add(run)
        runs.end(run)
    table[1].lost = True  # its lease was lost meanwhile: its result is discarded
    assert runs.load() == (0, 3)
    assert runs.in_flight() == 3
    # when the reporter takes the batch and then finishes it
    kept = runs.start_reporting_many(table)
    # then the lost one is not reported, the others are no longer in flight
    assert kept == [True, False, True]
    assert runs.in_flight() == 1
    runs.finish_many(table)
    assert runs.load() == (0, 0)
    assert runs.in_flight() == 0
    assert not {r.key for r in table} & identity.held()


def test_finish_many_leaves_a_newer_run_of_the_same_job_in_place() -> None:
    identity = current()
    runs = Runs(identity)
    old, new = Run(_job(9, fence=1), None), Run(_job(9, fence=2), None)
    runs.add(old)
    runs.add(new)
    runs.finish_many([old], abandoned="lease lost")
    assert runs.all() == [new]
    assert runs.load() == (1, 1)
