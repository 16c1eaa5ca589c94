"""The SQLite schema as numbered, idempotent migration steps.

`schema_version` records every step applied. A step is applied once, inside the
same `BEGIN IMMEDIATE` transaction that records it, so concurrent openers of a
fresh file cannot both apply it. Steps are never edited once released: a change
is a new step appended to MIGRATIONS.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: states a job can be leased from, and states that hold a lease. They appear as
#: literals in the partial indexes below; queries render the same literal lists
#: (see `in_list`) so SQLite's planner can prove the index applies.
CLAIMABLE_STATES = ("queued", "retry_wait")
LEASED_STATES = ("cancelling", "leased", "reconciling", "running")
ACTIVE_STATES = ("cancelling", "leased", "queued", "retry_wait", "running", "waiting")
#: the states a job waits for its prerequisites in (docs/dependencies.md)
WAITING_STATES = ("waiting",)
#: the states that take a slot of a concurrency limit (docs/flow-control.md): the
#: sources of the spec's heartbeat, as `jobs_held` was created with them
HELD_STATES = ("cancelling", "leased", "running")
#: the lists released migrations wrote into their partial indexes (a released
#: migration never changes): migration 1's held and active states, migration 5's
#: active states
_V1_LEASED_STATES = ("cancelling", "leased", "running")
_V1_ACTIVE_STATES = ("cancelling", "leased", "queued", "retry_wait", "running")
_V5_ACTIVE_STATES = ("cancelling", "leased", "queued", "retry_wait", "running", "waiting")
_V6_LEASED_STATES = ("cancelling", "leased", "reconciling", "running")

_STATE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # always fullmatch: "$" admits a final newline


def in_list(states: Iterable[str]) -> str:
    """`('a','b')` for validated state names, sorted, so equal sets render equally."""
    names = sorted(set(states))
    for name in names:
        if not isinstance(name, str) or not _STATE.fullmatch(name):
            raise ValueError(f"not a valid state name: {name!r}")
    return "(" + ",".join(f"'{n}'" for n in names) + ")"


_V1 = [
    """
    CREATE TABLE jobs (
        id              TEXT PRIMARY KEY,
        kind            TEXT NOT NULL,
        queue           TEXT NOT NULL,
        payload_json    TEXT NOT NULL,
        state           TEXT NOT NULL,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        run_after       REAL NOT NULL,
        priority        INTEGER NOT NULL,
        attempt         INTEGER NOT NULL,
        max_attempts    INTEGER NOT NULL,
        recoveries      INTEGER NOT NULL,
        max_recoveries  INTEGER NOT NULL,
        deadline        REAL,
        timeout         REAL,
        retry_safe      INTEGER NOT NULL,
        fence           INTEGER NOT NULL,
        version         INTEGER NOT NULL,
        owner           TEXT,
        lease_until     REAL,
        started_at      REAL,
        finished_at     REAL,
        idempotency_key TEXT,
        correlation_id  TEXT,
        last_error      TEXT,
        result_json     TEXT
    )
    """,
    # Claim: the due jobs of a queue in lease order. Partial, so the (many)
    # finished jobs never enter the hot index and it stays the size of the backlog.
    f"""
    CREATE INDEX jobs_due ON jobs (queue, priority, run_after, id)
    WHERE state IN {in_list(CLAIMABLE_STATES)}
    """,
    # Recovery sweep: held leases by expiry; only jobs that hold a lease.
    f"""
    CREATE INDEX jobs_lease ON jobs (lease_until)
    WHERE state IN {in_list(_V1_LEASED_STATES)}
    """,
    # Deadline sweep: unfinished jobs that have a deadline.
    f"""
    CREATE INDEX jobs_deadline ON jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN {in_list(_V1_ACTIVE_STATES)}
    """,
    # Counts, scans by state and the capacity check: (queue, state) covers GROUP BY.
    "CREATE INDEX jobs_queue_state ON jobs (queue, state)",
    "CREATE INDEX jobs_state ON jobs (state)",
    # Retention: finished jobs by state and age (prune walks it oldest first).
    """
    CREATE INDEX jobs_finished ON jobs (state, finished_at)
    WHERE finished_at IS NOT NULL
    """,
    # Idempotent submit: one job per key; jobs without a key are not indexed.
    """
    CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
    """,
    # The audit trail: append-only; `seq` gives the order entries were written.
    """
    CREATE TABLE job_events (
        seq            INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id         TEXT NOT NULL,
        version        INTEGER NOT NULL,
        at             REAL NOT NULL,
        event          TEXT NOT NULL,
        from_state     TEXT,
        to_state       TEXT NOT NULL,
        fence          INTEGER NOT NULL,
        attempt        INTEGER NOT NULL,
        actor          TEXT,
        reason         TEXT,
        error          TEXT,
        correlation_id TEXT,
        outcome        TEXT NOT NULL,
        data_json      TEXT NOT NULL
    )
    """,
    # History of one job in write order, and prune's delete by job id.
    "CREATE INDEX job_events_job ON job_events (job_id, seq)",
]

# Queues an operator paused (`jobfsm pause`): claims leave their jobs alone.
_V2 = [
    """
    CREATE TABLE queue_pauses (
        queue  TEXT PRIMARY KEY,
        actor  TEXT NOT NULL,
        reason TEXT NOT NULL,
        at     REAL NOT NULL
    )
    """,
]

# Schedules (`jobfsm schedules`, docs/schedules.md): the definition as JSON and the
# newest tick submitted, advanced by compare-and-set.
_V3 = [
    """
    CREATE TABLE schedules (
        name       TEXT PRIMARY KEY,
        definition TEXT NOT NULL,
        origin     TEXT NOT NULL,
        paused     INTEGER NOT NULL DEFAULT 0,
        last_tick  REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )
    """,
]

# The latest progress a running job's handler reported (written by its owner).
_V4 = ["ALTER TABLE jobs ADD COLUMN progress_json TEXT"]

# Dependencies (docs/dependencies.md): a job's prerequisites, one row each. The
# index on after_id finds the dependents of a job that finished; jobs_waiting walks
# the waiting jobs in id order (the recovery sweep's bounded backstop); the deadline
# index takes the waiting state in.
_V5 = [
    "ALTER TABLE jobs ADD COLUMN on_failed_dependency TEXT",
    """
    CREATE TABLE job_deps (
        job_id   TEXT NOT NULL,
        after_id TEXT NOT NULL,
        PRIMARY KEY (job_id, after_id)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX job_deps_after ON job_deps (after_id, job_id)",
    f"CREATE INDEX jobs_waiting ON jobs (id) WHERE state IN {in_list(WAITING_STATES)}",
    "DROP INDEX jobs_deadline",
    f"""
    CREATE INDEX jobs_deadline ON jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN {in_list(_V5_ACTIVE_STATES)}
    """,
]

# Run marks and reason codes: the current attempt's mark count (NULL: its handler does
# not declare its outside calls), whether its kind has a reconciler, and every audit
# entry's reason code.
# A reconcile claim holds a lease too: the sweep's lease index covers `reconciling`.
_V6 = [
    "ALTER TABLE jobs ADD COLUMN marks INTEGER",
    "ALTER TABLE jobs ADD COLUMN reconciler INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE job_events ADD COLUMN code TEXT",
    "DROP INDEX jobs_lease",
    f"""
    CREATE INDEX jobs_lease ON jobs (lease_until)
    WHERE state IN {in_list(_V6_LEASED_STATES)}
    """,
]

# Whose policy holds: the submitter said retry_safe=False for this very job, so the
# handler's policy, stamped at start, never loosens it.
_V7 = ["ALTER TABLE jobs ADD COLUMN retry_safe_pinned INTEGER NOT NULL DEFAULT 0"]

# Failure stages: where in its run a job failed, beside the audit entry's reason code.
_V8 = ["ALTER TABLE job_events ADD COLUMN stage TEXT"]

# Flow control (docs/flow-control.md, docs/uniqueness.md, docs/retention.md):
# - jobs.unique_key: the key of a unique job; jobs_unique finds the jobs of a
#   (kind, key) a unique submit may duplicate, newest first;
# - jobs_held: the jobs that take a slot of a kind's concurrency limit, counted by the
#   claim that enforces it (a queue's are counted through jobs_queue_state);
# - limits: each global limit (key "kind:NAME" or "queue:NAME"), where it was declared
#   (code or operator) and who set it last, why; limit_changes: every change, audited;
# - limit_leases: the times of the latest leases of each rate-limited key (at most its
#   rate of them are kept), the sliding window a claim counts;
# - service_leases: which worker runs a singleton maintenance service (retention) until
#   when, taken by compare-and-set.
_V9 = [
    "ALTER TABLE jobs ADD COLUMN unique_key TEXT",
    """
    CREATE INDEX jobs_unique ON jobs (kind, unique_key, created_at)
    WHERE unique_key IS NOT NULL
    """,
    f"CREATE INDEX jobs_held ON jobs (kind) WHERE state IN {in_list(HELD_STATES)}",
    """
    CREATE TABLE limits (
        key         TEXT PRIMARY KEY,
        concurrency INTEGER,
        rate        INTEGER,
        period      REAL,
        origin      TEXT NOT NULL,
        actor       TEXT NOT NULL,
        reason      TEXT NOT NULL,
        at          REAL NOT NULL
    )
    """,
    """
    CREATE TABLE limit_changes (
        seq    INTEGER PRIMARY KEY AUTOINCREMENT,
        key    TEXT NOT NULL,
        at     REAL NOT NULL,
        actor  TEXT NOT NULL,
        reason TEXT NOT NULL,
        origin TEXT NOT NULL,
        before TEXT,
        after  TEXT
    )
    """,
    "CREATE INDEX limit_changes_key ON limit_changes (key, seq)",
    "CREATE TABLE limit_leases (key TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX limit_leases_key ON limit_leases (key, at)",
    """
    CREATE TABLE service_leases (
        name  TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        until REAL NOT NULL
    )
    """,
]

# Schedules, wave 3 (docs/schedules.md): when a scheduler last handled each schedule
# (it tells ticks missed while no scheduler ran from late ones), the audited changes
# of schedules (kept after a schedule is removed), and the running schedulers: the
# kinds their workers handle and which one leads the passes.
_V10 = [
    "ALTER TABLE schedules ADD COLUMN checked_at REAL",
    """
    CREATE TABLE schedule_changes (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        name       TEXT NOT NULL,
        action     TEXT NOT NULL,
        actor      TEXT NOT NULL,
        reason     TEXT NOT NULL,
        at         REAL NOT NULL,
        definition TEXT
    )
    """,
    "CREATE INDEX schedule_changes_name ON schedule_changes (name, seq)",
    """
    CREATE TABLE schedulers (
        owner      TEXT PRIMARY KEY,
        kinds_json TEXT NOT NULL,
        seen_at    REAL NOT NULL,
        lead_until REAL
    )
    """,
]

#: (number, statements): applied in order, each exactly once.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, tuple(_V1)),
    (2, tuple(_V2)),
    (3, tuple(_V3)),
    (4, tuple(_V4)),
    (5, tuple(_V5)),
    (6, tuple(_V6)),
    (7, tuple(_V7)),
    (8, tuple(_V8)),
    (9, tuple(_V9)),
    (10, tuple(_V10)),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
)
"""
