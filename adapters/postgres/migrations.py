"""The PostgreSQL schema: numbered, idempotent migrations applied under an advisory lock.

Every migration is plain SQL with `{s}` standing for the quoted schema name. A
migration runs once, in the same transaction as the `schema_version` row that
records it, while the migrating session holds a transaction advisory lock keyed
by the schema, so two processes migrating at once apply each migration once.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from fsm.errors import SchemaError

#: advisory-lock class ids (first key of the two-int form). Reserved for jobfsm, so its
#: locks never meet an application's: 0x4A464D47 is "JFMG", 0x4A464C56 is "JFLV".
MIGRATE_CLASS = 0x4A464D47
LIVENESS_CLASS = 0x4A464C56
#: class id of the per-queue lock an insert with a capacity holds: "JFCQ"
CAPACITY_CLASS = 0x4A464351
#: class id of the lock a scheduler's beat holds while it takes the lead: "JFSC"
SCHEDULER_CLASS = 0x4A465343
#: class id of the per-(kind, unique key) lock a unique submit holds: "JFUQ"
UNIQUE_CLASS = 0x4A465551
#: every table jobfsm creates in its schema (drop_schema removes exactly these)
TABLES = (
    "job_deps",
    "job_events",
    "jobs",
    "limit_changes",
    "limit_leases",
    "limits",
    "liveness",
    "queue_pauses",
    "schedule_changes",
    "schedulers",
    "schedules",
    "schema_version",
    "service_leases",
)

# Hot-path indexes. Finished jobs (succeeded/failed/cancelled) are kept out of the
# indexes that claim and the recovery sweep walk, so a table with millions of
# finished rows leases as fast as an empty one.
_V1 = """
CREATE TABLE {s}.jobs (
    seq bigint GENERATED ALWAYS AS IDENTITY,   -- insertion order (scans, prune)
    id text COLLATE "C" PRIMARY KEY,           -- byte order, as Python sorts ids
    kind text NOT NULL,
    queue text NOT NULL,
    payload_json text NOT NULL,
    state text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    run_after double precision NOT NULL,
    priority bigint NOT NULL,
    attempt bigint NOT NULL,
    max_attempts bigint NOT NULL,
    recoveries bigint NOT NULL,
    max_recoveries bigint NOT NULL,
    deadline double precision,
    timeout double precision,
    retry_safe boolean NOT NULL,
    fence bigint NOT NULL,
    version bigint NOT NULL,
    owner text,                                -- Owner as compact JSON (adapters/_rows.py)
    lease_until double precision,
    started_at double precision,
    finished_at double precision,
    idempotency_key text,
    correlation_id text,
    last_error text,
    result_json text
);
-- claim: due jobs of a queue in lease order. Partial on the claimable states, so
-- leased, running and finished rows are not in it at all.
CREATE INDEX jobs_due ON {s}.jobs (queue, priority, run_after, id)
    WHERE state IN ('queued', 'retry_wait');
-- recovery sweep: leases that lapsed, only over jobs that hold a lease.
CREATE INDEX jobs_leased ON {s}.jobs (lease_until)
    WHERE state IN ('leased', 'running', 'cancelling');
-- deadline sweep: only unfinished jobs that have a deadline.
CREATE INDEX jobs_deadline ON {s}.jobs (deadline)
    WHERE deadline IS NOT NULL AND finished_at IS NULL;
-- scans by state (investigate, operators) and counts (index-only scan).
CREATE INDEX jobs_state ON {s}.jobs (state, queue);
-- prune: finished jobs in insertion order, the order prune deletes them in.
CREATE INDEX jobs_finished ON {s}.jobs (seq) WHERE finished_at IS NOT NULL;
-- submit: a second submit with the same key finds the first job.
CREATE UNIQUE INDEX jobs_idempotency_key ON {s}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Append-only audit trail, written in the transaction of the change it explains.
CREATE TABLE {s}.job_events (
    job_id text COLLATE "C" NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,   -- the order entries were written in
    version bigint NOT NULL,
    at double precision NOT NULL,
    event text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    fence bigint NOT NULL,
    attempt bigint NOT NULL,
    actor text,
    reason text,
    error text,
    correlation_id text,
    outcome text NOT NULL,
    data_json text NOT NULL,
    -- history(job) and prune read one job's entries in order
    PRIMARY KEY (job_id, seq)
);

-- Worker processes that hold a liveness advisory lock (docs/stores.md). probe()
-- confirms death only for an owner registered here: one that never took the lock
-- is "unknown", never "dead".
CREATE TABLE {s}.liveness (
    incarnation text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    lock_key integer NOT NULL,
    held_at double precision NOT NULL
);
"""

# The dashboard's reads (adapters/postgres/browse.py): jobs of one kind newest first and
# search by correlation id (each would otherwise walk every finished row), and the audit
# entries of a recent window. BRIN on `at` stays a few pages for millions of rows
# (entries are appended in time order) and costs next to nothing per append.
_V2 = """
CREATE INDEX jobs_kind ON {s}.jobs (kind, id);
CREATE INDEX jobs_correlation ON {s}.jobs (correlation_id);
CREATE INDEX job_events_at ON {s}.job_events USING brin (at) WITH (autosummarize = on);
"""

# Queues an operator paused (`jobfsm pause`): claims leave their jobs alone.
_V3 = """
CREATE TABLE {s}.queue_pauses (
    queue  text PRIMARY KEY,
    actor  text NOT NULL,
    reason text NOT NULL,
    at     double precision NOT NULL
);
"""

# Schedules (`jobfsm schedules`, docs/schedules.md): the definition as JSON and the
# newest tick submitted, advanced by compare-and-set.
_V4 = """
CREATE TABLE {s}.schedules (
    name       text PRIMARY KEY,
    definition text NOT NULL,
    origin     text NOT NULL,
    paused     boolean NOT NULL DEFAULT false,
    last_tick  double precision,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
"""

# The latest progress a running job's handler reported (written by its owner).
_V5 = """
ALTER TABLE {s}.jobs ADD COLUMN progress_json text;
"""

# Dependencies (docs/dependencies.md): a job's prerequisites, one row each. The
# index on after_id finds the dependents of a job that finished; jobs_waiting walks
# waiting jobs in id order (the recovery sweep's bounded backstop).
_V6 = """
ALTER TABLE {s}.jobs ADD COLUMN on_failed_dependency text;
CREATE TABLE {s}.job_deps (
    job_id   text COLLATE "C" NOT NULL,
    after_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (job_id, after_id)
);
CREATE INDEX job_deps_after ON {s}.job_deps (after_id, job_id);
CREATE INDEX jobs_waiting ON {s}.jobs (id) WHERE state IN ('waiting');
"""

# Run marks and reason codes: the current attempt's mark count (NULL: its handler does
# not declare its outside calls), whether its kind has a reconciler, and every audit
# entry's reason code.
# A reconcile claim holds a lease too: the sweep's lease index covers `reconciling`.
_V7 = """
ALTER TABLE {s}.jobs ADD COLUMN marks bigint;
ALTER TABLE {s}.jobs ADD COLUMN reconciler boolean NOT NULL DEFAULT false;
ALTER TABLE {s}.job_events ADD COLUMN code text;
DROP INDEX {s}.jobs_leased;
CREATE INDEX jobs_leased ON {s}.jobs (lease_until)
    WHERE state IN ('leased', 'running', 'cancelling', 'reconciling');
"""

# Whose policy holds: the submitter said retry_safe=False for this very job, so the
# handler's policy, stamped at start, never loosens it.
_V8 = """
ALTER TABLE {s}.jobs ADD COLUMN retry_safe_pinned boolean NOT NULL DEFAULT false;
"""

# Failure stages: where in its run a job failed, beside the audit entry's reason code.
_V9 = """
ALTER TABLE {s}.job_events ADD COLUMN stage text;
"""

# Flow control (docs/flow-control.md, docs/uniqueness.md, docs/retention.md):
# - jobs.unique_key: the key of a unique job; jobs_unique finds the jobs of a
#   (kind, key) a unique submit may duplicate;
# (the claim that enforces a concurrency limit counts the jobs holding a slot through
#   jobs_leased: an index of their own would draw the recovery sweep's plan away from it);
# - limits: each global limit (key "kind:NAME" or "queue:NAME"), where it was declared
#   (code or operator) and who set it last, why; limit_changes: every change, audited;
# - limit_leases: the times of the latest leases of each rate-limited key (at most its
#   rate of them are kept), the sliding window a claim counts;
# - service_leases: which worker runs a singleton maintenance service (retention) until
#   when, taken by compare-and-set.
_V10 = """
ALTER TABLE {s}.jobs ADD COLUMN unique_key text;
CREATE INDEX jobs_unique ON {s}.jobs (kind, unique_key, created_at)
    WHERE unique_key IS NOT NULL;
CREATE TABLE {s}.limits (
    key         text PRIMARY KEY,
    concurrency bigint,
    rate        bigint,
    period      double precision,
    origin      text NOT NULL,
    actor       text NOT NULL,
    reason      text NOT NULL,
    at          double precision NOT NULL
);
CREATE TABLE {s}.limit_changes (
    seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key    text NOT NULL,
    at     double precision NOT NULL,
    actor  text NOT NULL,
    reason text NOT NULL,
    origin text NOT NULL,
    before text,
    after  text
);
CREATE INDEX limit_changes_key ON {s}.limit_changes (key, seq);
CREATE TABLE {s}.limit_leases (
    key text NOT NULL,
    at  double precision NOT NULL
);
CREATE INDEX limit_leases_key ON {s}.limit_leases (key, at);
CREATE TABLE {s}.service_leases (
    name  text PRIMARY KEY,
    owner text NOT NULL,
    until double precision NOT NULL
);
"""

# Schedules, wave 3 (docs/schedules.md): when a scheduler last handled each schedule
# (it tells ticks missed while no scheduler ran from late ones), the audited changes
# of schedules (kept after a schedule is removed), and the running schedulers: the
# kinds their workers handle and which one leads the passes.
_V11 = """
ALTER TABLE {s}.schedules ADD COLUMN checked_at double precision;
CREATE TABLE {s}.schedule_changes (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL,
    action     text NOT NULL,
    actor      text NOT NULL,
    reason     text NOT NULL,
    at         double precision NOT NULL,
    definition text
);
CREATE INDEX schedule_changes_name ON {s}.schedule_changes (name, seq);
CREATE TABLE {s}.schedulers (
    owner      text PRIMARY KEY,
    kinds_json text NOT NULL,
    seen_at    double precision NOT NULL,
    lead_until double precision
);
"""

# Claims under limits counted ahead of the key locks (docs/flow-control.md):
# - limits.leased: how many leases claims have granted under the key, a running total
#   each claim under limits adds to with its commit; a claim that counted before
#   taking the key's lock checks under it that no more were granted since than the
#   room its count left;
# - limit_leases.n: a claim adds one row per key for all the leases it grants at its
#   time, not one per lease (rows from before this migration count one each).
_V12 = """
ALTER TABLE {s}.limits ADD COLUMN leased bigint NOT NULL DEFAULT 0;
ALTER TABLE {s}.limit_leases ADD COLUMN n bigint NOT NULL DEFAULT 1;
"""

#: (version, description, SQL). Append only; never edit a released migration.
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "jobs, job_events, liveness", _V1),
    (2, "dashboard: jobs by kind, correlation id search, audit entries by time", _V2),
    (3, "paused queues", _V3),
    (4, "schedules", _V4),
    (5, "jobs: the latest progress of a running job", _V5),
    (6, "dependencies: job_deps, on_failed_dependency, waiting jobs by id", _V6),
    (7, "run marks and audit reason codes", _V7),
    (8, "jobs: retry_safe=False pinned by the submitter", _V8),
    (9, "audit: the failure stage beside the reason code", _V9),
    (10, "flow control: limits, their changes and rate windows, unique keys, service leases", _V10),
    (11, "schedules: checked_at, audited changes, schedulers", _V11),
    (12, "flow control: leases granted per limit, a rate window's leases by claim", _V12),
)
LATEST = MIGRATIONS[-1][0]


def quote(schema: str) -> str:
    """The schema as a quoted identifier (the name was validated by the URL parser)."""
    return '"' + schema.replace('"', '""') + '"'


def key32(text: str) -> int:
    """A stable signed 32-bit key for `text` (the second int of an advisory lock)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The highest applied migration, or 0 if the schema has never been migrated."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{quote(schema)}.schema_version",)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = conn.execute(
        f"SELECT coalesce(max(version), 0) FROM {quote(schema)}.schema_version"
    ).fetchone()
    return int(found[0]) if found else 0


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    """Apply pending migrations in one transaction; return the versions applied.

    `conn` must be in autocommit mode. Raises SchemaError if the schema is newer
    than this jobfsm understands.
    """
    s = quote(schema)
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (MIGRATE_CLASS, key32(schema)))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version ("
            " version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        have = current_version(conn, schema)
        if have > LATEST:
            raise SchemaError(
                f"PostgreSQL schema {schema!r} is at version {have}, newer than this jobfsm "
                f"understands (up to {LATEST}); upgrade jobfsm"
            )
        for version, description, text in MIGRATIONS:
            if version <= have:
                continue
            conn.execute(text.replace("{s}", s).encode())
            conn.execute(
                f"INSERT INTO {s}.schema_version (version, description) VALUES (%s, %s)",
                (version, description),
            )
            applied.append(version)
    return applied


def drop(conn: psycopg.Connection[Any], schema: str) -> tuple[str, ...]:
    """Drop jobfsm's tables (their indexes and identity sequences go with them), then
    the schema itself unless it is `public` or still holds anything else; the names of
    what is left in it (empty when the schema is gone)."""
    s = quote(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (MIGRATE_CLASS, key32(schema)))
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {s}.{table}")
        if schema != "public":
            try:
                with conn.transaction():  # a savepoint: a schema with other objects stays
                    conn.execute(f"DROP SCHEMA IF EXISTS {s} RESTRICT")
            except pgerrors.DependentObjectsStillExist:
                pass
        return left_in(conn, schema)


def left_in(conn: psycopg.Connection[Any], schema: str) -> tuple[str, ...]:
    """The tables, views, sequences and functions in `schema` (none if it is gone)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') "
        "UNION ALL SELECT p.proname || '()' FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1",
        (schema, schema),
    ).fetchall()
    return tuple(r[0] for r in rows)


def check(conn: psycopg.Connection[Any], schema: str) -> None:
    """Raise SchemaError unless the schema is exactly at LATEST (used with ?migrate=false)."""
    have = current_version(conn, schema)
    if have > LATEST:
        raise SchemaError(
            f"PostgreSQL schema {schema!r} is at version {have}, newer than this jobfsm "
            f"understands (up to {LATEST}); upgrade jobfsm"
        )
    if have < LATEST:
        raise SchemaError(
            f"PostgreSQL schema {schema!r} is at version {have}, this jobfsm needs {LATEST}; "
            "open it without ?migrate=false or call store.migrate()"
        )
