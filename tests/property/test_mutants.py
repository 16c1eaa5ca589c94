"""The mutation check: the fault suite must fail against each broken store.

Each mutant in tests/property/mutants.py breaks one promise. The suite runs
against it with the ci size (200 examples x 50 steps, derandomized, no
shrinking: finding the bug is what is checked, not its minimal form) and must
fail with the invariant that names the broken promise.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from adapters.memory import MemoryStore
from fsm.ports import Store
from fsm.testing.faults import fault_machine

from . import mutants

FIND_ONLY = settings(
    max_examples=200,
    stateful_step_count=50,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
)

EXPECTED = [
    # without compare-and-set a decision made on an old record is written over a newer
    # one: a version that does not grow, or a batched report decided on the record a
    # zombie last saw overwriting the job another worker holds now (I7)
    (
        mutants.NoVersionCheckStore,
        r"I[28] .*(starts from|version does not grow)|I7 .*stale report .* changed the job",
    ),
    # a renew of a lease another run holds now: of another owner, or of the zombie's own
    # process under its older fence (heartbeat_taken_over_once); the draw says which first
    (
        mutants.NoFenceRenewStore,
        r"I1 .*(renewed a lease it does not hold|with the older fence \d+ renewed it)",
    ),
    (mutants.DoubleLeaseStore, r"I1 |I6 .*owner"),
    (mutants.UncountedRecoveryStore, r"I6 .*recoveries"),
    # an unfinished job pruned (I3), or a waiting job's prerequisite with it (D0): which
    # check sees it first depends on the order of the jobs' random ids
    (mutants.PruneAnythingStore, r"I3 .*pruned while|D0 job"),
    (mutants.PhantomAuditStore, r"I[28] .*(starts from|version does not grow)"),
    # every prerequisite read as succeeded breaks D1 (cancel / investigate rules) and D2
    # (the run rule): which dependent is leased early first depends on the draw
    (mutants.EarlyReleaseStore, r"D[12] .*leased while its prerequisite"),
]


def test_every_mutant_is_listed_with_its_expected_failure() -> None:
    assert {cls for cls, _ in EXPECTED} == set(mutants.MUTANTS)


@pytest.mark.parametrize(
    ("store_class", "names"), EXPECTED, ids=lambda v: getattr(v, "__name__", "")
)
def test_the_fault_suite_catches_a_broken_store(store_class: type[MemoryStore], names: str) -> None:
    # given a store with one real bug
    machine = fault_machine(store_class)
    # when the fault suite runs against it
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=FIND_ONLY)
    # then it fails, naming the invariant the bug breaks
    assert re.search(names, str(caught.value)), str(caught.value)[:2000]


def test_the_fault_suite_catches_a_broken_sqlite_store(tmp_path: Path) -> None:
    # given a real SQLite store whose prune forgets to look at the state
    numbers = itertools.count()

    def factory() -> Store:
        return mutants.sqlite_mutant(str(tmp_path / f"example-{next(numbers)}.db"))

    # when the fault suite runs against fresh files of it
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(fault_machine(factory), settings=FIND_ONLY)
    # then it fails: a job that had not finished was deleted
    assert re.search(r"I3 .*pruned while", str(caught.value)), str(caught.value)[:2000]


# --- production-code mutants (tests/property/mutants.py PATCHES) ---------------------

#: the subset CI runs (one per promise family; the full set: python -m benchmarks.mutation),
#: each with the fault model that covers its promise: CI runs that model alone at the
#: default size (`jobfsm faults --model NAME`); the whole suite's time to kill is in the
#: table of docs/fault-suites.md (a RabbitMQ mutant: `--model delivery --delivery URL`)
CI_PATCHES: dict[str, str] = {
    "core-retry-deadline-without-delay": "policy",
    "core-backoff-cap-ignored": "policy",
    "core-expire-running-uncounted": "policy",
    "memory-renew-keeps-version": "races",
    "sqlite-audit-second-transaction": "crash",
    "sqlite-begin-deferred": "concurrency",
    "rabbitmq-ack-on-hand-out": "delivery",  # the real broker: A1 (the delivery model)
    "rabbitmq-outbox-failure-forgotten": "delivery",  # outbox liveness: A4 (publish_outage)
    "core-release-on-any-success": "machine",  # dependencies: D1
    "reconcile-failure-read-as-not-started": "machine",  # reconcile: I7 (lose_marked_run)
    "core-stale-fence-accepted": "machine",  # fences: I7 (lease_taken_over_once)
    "core-batched-report-takes-the-stored-fence": "machine",  # I7 (batch_taken_over_once)
    "registry-drop-by-job-id": "machine",  # held registry: I1 (old_run_ends_after_reclaim)
    "recovery-names-only-a-running-owner": "races",  # recoveries name the lost owner: I8 (races)
    "reconcile-answer-under-current-fence": "machine",  # reconcile: I7 (late_reconcile_answer)
    "postgres-claim-by-ids-ignores-kinds": "claims",  # kind filters: Q1 (the claims model)
    "postgres-unknown-commit-taken-as-own": "commits",  # async/sync unknown commit: U1 (commits)
    "schedules-last-tick-to-pass-time": "schedules",  # schedules: T3 (the schedules model)
    "memory-schedule-advance-unchecked": "schedules",  # overlapping passes: T4 (schedules)
    "sqlite-schedule-checked-at-as-given": "schedules",  # a late pass's time: T4 (schedules)
    "sqlite-schedule-first-advance-never-matches": "schedules",  # a pass records: T1
    "postgres-scheduler-lead-compared-backwards": "schedules",  # one leads: T5 (schedules)
    "session-submit-outside-its-transaction": "transactions",  # transactional submit: J1
    "limits-claim-ignores-concurrency-by-one": "limits",  # global limits: L1 (the limits model)
    "limits-rate-window-short": "limits",  # rate windows: L2 (the limits model)
    "postgres-limits-gate-ignores-leases-since": "limits",  # claims counted ahead: L1 (limits)
    "postgres-limits-other-queue-starved": "limits",  # another queue's limit: L4 (limits)
    "postgres-limits-window-rows-deleted-inside": "limits",  # a rate's rows: L2 (limits)
    "postgres-limits-stale-spent-guess": "limits",  # a handle's spent kinds: L4 (limits)
    "postgres-limits-kept-count-taken-as-new": "limits",  # a handle's kept counts: L1
    "postgres-claim-ahead-misses-a-new-limit": "limits",  # a limit set since: L1 (limits)
    "hold-after-claiming": "worker",  # a run held as its claim ends: W3 (the worker model)
    "worker-sweep-ignores-claim-in-flight": "worker",  # a claim in flight: W3 (the worker model)
    "recheck-claim-not-held": "machine",  # recheck claims held: I1 (own_sweep_beside_a_recheck)
    "aio-insert-drops-capacity": "concurrency",  # capacity, async submits: K4 (concurrency)
    "retention-override-not-held": "retention",  # prerequisites kept: G5 (retention)
    "unique-live-scope-drops-retry-wait": "unique",  # unique submits: N2 (the unique model)
    "retention-lease-ignores-expiry": "retention",  # automatic retention: G1 (the retention model)
    "payloads-int-takes-a-bool": "payloads",  # typed payloads: Y1 (the payloads model)
    "reports-payload-limit-inclusive": "reports",  # a worker's reports: E1 (the reports model)
    "progress-saved-before-the-write": "reports",  # progress writes that fail: E5 (reports)
    "pauses-own-pause-not-seen": "pauses",  # paused queues: H1 (the pauses model)
    "aio-pool-turn-kept-on-error": "pool",  # failing calls on one asyncio store: B1 (pool)
    "postgres-prerequisites-drop-pruned": "retention",  # a pruned prerequisite: D3 (retention)
    "sqlite-progress-fence-unchecked": "machine",  # an own older run's save: U2 (machine)
    "sqlite-renew-fence-unchecked": "machine",  # an own older run's renew: I1 (machine)
    "postgres-rejected-audit-ignores-fence": "machine",  # rejected once per fence: I7 (machine)
    "rescue-own-verdict-per-owner": "machine",  # own jobs judged per run: I1 (machine)
    "reconcile-marks-of-every-attempt": "machine",  # the lost attempt's marks: I7 (machine)
    "reconcile-marks-include-rejected": "machine",  # a zombie's rejected mark: I7 (machine)
    "sqlite-erase-blanks-only-the-submit": "machine",  # an erase's trail: F1 (machine)
    "postgres-renew-confirm-owner-and-fence-only": "commits",  # a lost renew: U1 (commits)
    "postgres-scheduler-beat-unlocked": "schedules",  # leads taken at once: T5 (schedules)
    "memory-queue-limit-ignores-held-jobs": "limits",  # a queue limit, jobs held: L1 (limits)
    "wait-poll-pause-uncapped": "waits",  # a polled wait's reads: O3 (the waits model)
    "retainer-keeps-lease-on-drain": "retention",  # the retention thread's drain: G1/G6
    "postgres-unwatch-drops-every-watcher": "waits",  # a watched wait's wake-up: O5 (waits)
}


def test_the_mutant_set_holds_at_least_25_patches_and_each_applies_to_the_tree(
    tmp_path: Path,
) -> None:
    # given a copy, per patch, of the one file it edits (apply_patch reads and writes only
    # `patch.path`; a copy of the whole tree per patch, 57 of them, cost 6 s of CPU and
    # a minute of a loaded run, #38); when each is applied; then none is stale
    import shutil

    from benchmarks.mutation import REPO

    assert len(mutants.PATCHES) >= 25
    assert len({p.name for p in mutants.PATCHES}) == len(mutants.PATCHES)
    for patch in mutants.PATCHES:
        root = tmp_path / patch.name
        (root / patch.path).parent.mkdir(parents=True)
        shutil.copyfile(REPO / patch.path, root / patch.path)
        mutants.apply_patch(root, patch)
        assert (root / patch.path).read_text() != (REPO / patch.path).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", CI_PATCHES)
def test_jobfsm_faults_at_default_size_kills_a_production_mutant(name: str) -> None:
    # given the tree copied with one careless change applied
    from benchmarks.mutation import PG_DEFAULT, run_one

    (patch,) = [p for p in mutants.PATCHES if p.name == name]
    model = CI_PATCHES[name]
    for store in patch.stores:
        # when `jobfsm faults --store ...` (the model that covers its promise) runs from
        # that copy at the default size
        row = run_one(
            patch, store, size="default", timeout=240, pg=PG_DEFAULT, extra=("--model", model)
        )
        # then it fails in that model, naming a promise
        assert row["killed"], row
        assert row["promise"], row
        assert row["model"] == model, row
