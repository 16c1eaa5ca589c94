"""SQL text for the PostgreSQL store, built once per schema (names validated and quoted)."""

from __future__ import annotations

import re

from adapters._rows import AUDIT_COLUMNS, JOB_COLUMNS
from fsm.errors import BadInput

#: what a checked apply statement fails with when a row was not written as decided
UNWRITTEN = "jobfsm claim: locked jobs written"

# Types of the columns, for the `unnest(%s::type[], ...)` batch statements.
JOB_TYPES: dict[str, str] = {
    "id": "text",
    "kind": "text",
    "queue": "text",
    "payload_json": "text",
    "state": "text",
    "created_at": "float8",
    "updated_at": "float8",
    "run_after": "float8",
    "priority": "int8",
    "attempt": "int8",
    "max_attempts": "int8",
    "recoveries": "int8",
    "max_recoveries": "int8",
    "deadline": "float8",
    "timeout": "float8",
    "retry_safe": "bool",
    "fence": "int8",
    "version": "int8",
    "owner": "text",
    "lease_until": "float8",
    "started_at": "float8",
    "finished_at": "float8",
    "idempotency_key": "text",
    "correlation_id": "text",
    "last_error": "text",
    "result_json": "text",
    "progress_json": "text",
    "on_failed_dependency": "text",
    "marks": "int8",
    "reconciler": "bool",
    "retry_safe_pinned": "bool",
    "unique_key": "text",
}
AUDIT_TYPES: dict[str, str] = {
    "job_id": "text",
    "version": "int8",
    "at": "float8",
    "event": "text",
    "from_state": "text",
    "to_state": "text",
    "fence": "int8",
    "attempt": "int8",
    "actor": "text",
    "reason": "text",
    "error": "text",
    "correlation_id": "text",
    "outcome": "text",
    "data_json": "text",
    "code": "text",
    "stage": "text",
}
assert tuple(JOB_TYPES) == JOB_COLUMNS, "JOB_TYPES must follow fsm.records.Job"
assert tuple(AUDIT_TYPES) == AUDIT_COLUMNS, "AUDIT_TYPES must follow fsm.records.AuditEntry"

_STATE = re.compile(r"[a-z][a-z0-9_]{0,62}")  # always fullmatch: "$" admits a final newline


def state_list(states: tuple[str, ...]) -> str:
    """Validated state names as an SQL list of literals, so partial indexes can match."""
    for s in states:
        if not isinstance(s, str) or not _STATE.fullmatch(s):
            raise BadInput(f"state names are lower-case identifiers; got {s!r}")
    return ", ".join(f"'{s}'" for s in states) if states else "NULL"


def cols(prefix: str = "") -> str:
    return ", ".join(f"{prefix}{c}" for c in JOB_COLUMNS)


def _unnest(types: dict[str, str]) -> str:
    return ", ".join(f"%b::{t}[]" for t in types.values())


def batch_rows(columns: tuple[tuple[str, str], ...], varying: tuple[bool, ...]) -> str:
    """SELECT of rows of `columns` (name, type) from parameters: one array per varying
    column (unnest), one scalar for a column that holds the same value in every row.

    Parameters, in this order: the scalars, then the arrays, each in column order.
    The first column must vary (unnest needs an array to count the rows).
    """
    if not varying or not varying[0]:
        raise BadInput("batch_rows: the first column must vary")
    names = [c for (c, _), v in zip(columns, varying, strict=True) if v]
    arrays = ", ".join(f"%b::{t}[]" for (_, t), v in zip(columns, varying, strict=True) if v)
    select = ", ".join(
        f"u.{c}" if v else f"%b::{t} AS {c}" for (c, t), v in zip(columns, varying, strict=True)
    )
    return f"SELECT {select} FROM unnest({arrays}) AS u({', '.join(names)})"


#: the shape of a claim's statement: (states it leases from, by ids, one queue, skipping
#: the ids in %(skip)s (jobs the core refused to lease), only the kinds in %(kinds)s,
#: under limits). A plain claim (not under limits) leases nothing while any limit is
#: stored: the claim then counts and leases under them in the same transaction
#: (`adapters.postgres.limits`); under limits, the kinds in %(blocked)s are left out.
ClaimShape = tuple[tuple[str, ...], bool, bool, bool, bool, bool]


class Statements:
    """Every statement of the store for one schema `s` (already quoted)."""

    def __init__(self, s: str) -> None:
        self.s = s
        jobs, events = f"{s}.jobs", f"{s}.job_events"
        self.jobs, self.events = jobs, events
        job_cols = cols()
        audit_cols = ", ".join(AUDIT_COLUMNS)
        self.get = f"SELECT {job_cols} FROM {jobs} WHERE id = %s"
        self.get_many = f"SELECT {job_cols} FROM {jobs} WHERE id = ANY(%s::text[])"
        self.by_key = (
            f"SELECT {job_cols} FROM {jobs} "
            "WHERE idempotency_key = ANY(%s::text[]) OR id = ANY(%s::text[])"
        )
        audit_source = (
            f"SELECT {audit_cols}, ord FROM unnest({_unnest(AUDIT_TYPES)}) WITH ORDINALITY "
            f"AS e({audit_cols}, ord)"
        )
        # one entry per job (insert, apply and claim batches have distinct ids), so
        # the order across jobs does not matter there
        unordered = f"SELECT * FROM unnest({_unnest(AUDIT_TYPES)}) AS e({audit_cols})"
        # insert: new rows in order; a duplicate key (or id) is skipped, the caller
        # re-reads it. The audit entries of inserted jobs and one NOTIFY per queue
        # commit in the same (implicit) transaction.
        self.insert = (
            f"WITH d AS (SELECT * FROM unnest({_unnest(JOB_TYPES)}) WITH ORDINALITY "
            f"AS d({job_cols}, ord)), "
            f"ins AS (INSERT INTO {jobs} ({job_cols}) SELECT {job_cols} FROM d ORDER BY ord "
            "ON CONFLICT DO NOTHING RETURNING id, queue), "
            f"aud AS (INSERT INTO {events} ({audit_cols}) SELECT {audit_cols} FROM "
            f"({unordered}) e WHERE e.job_id IN (SELECT id FROM ins)), "
            "note AS (SELECT count(pg_notify(%s, q)) AS n FROM (SELECT DISTINCT queue AS q "
            "FROM ins) qs) "
            "SELECT ins.id FROM ins, note"
        )
        # insert of one job (a single submit): the same statement with scalar
        # parameters, which cost the client far less to dump than one-element arrays
        one_job = ", ".join(f"%s::{t}" for t in JOB_TYPES.values())
        one_audit = ", ".join(f"%s::{t}" for t in AUDIT_TYPES.values())
        self.insert_one = (
            f"WITH ins AS (INSERT INTO {jobs} ({job_cols}) VALUES ({one_job}) "
            "ON CONFLICT DO NOTHING RETURNING id, queue), "
            f"aud AS (INSERT INTO {events} ({audit_cols}) SELECT * FROM "
            f"(VALUES ({one_audit})) AS e({audit_cols}) WHERE EXISTS (SELECT 1 FROM ins)), "
            "note AS (SELECT count(pg_notify(%s, queue)) AS n FROM ins) "
            "SELECT ins.id FROM ins, note"
        )
        # apply: compare-and-set on version for every decision; the audit entries of
        # the rows written go in with them, in the same statement.
        # progress_json is the owner's, written by `save_progress` without a version
        # bump: a decision never changes it (but erase, which sets only what it changes)
        sets = ", ".join(f"{c} = d.{c}" for c in JOB_COLUMNS if c not in ("id", "progress_json"))
        self.apply = (
            f"WITH d AS (SELECT * FROM unnest(%b::int8[], {_unnest(JOB_TYPES)}) "
            f"AS d(prev_version, {job_cols})), "
            f"upd AS (UPDATE {jobs} AS j SET {sets} FROM d "
            "WHERE j.id = d.id AND j.version = d.prev_version RETURNING j.id), "
            f"aud AS (INSERT INTO {events} ({audit_cols}) SELECT {audit_cols} FROM "
            f"({unordered}) e WHERE e.job_id IN (SELECT id FROM upd)) "
            "SELECT id FROM upd"
        )
        # apply of one decision (the Engine's transitions) takes scalar parameters,
        # which cost the client far less to send than one-element arrays
        one_entry = ", ".join(f"%s::{t}" for t in AUDIT_TYPES.values())
        self._one_entry = one_entry
        self._audit_cols = audit_cols
        self._changed: dict[tuple[tuple[str, ...], bool, bool, tuple[bool, ...], bool], str] = {}
        self._audits: dict[tuple[bool, ...], str] = {}
        self.copy_jobs = f"COPY {jobs} ({job_cols}) FROM STDIN"
        self.copy_events = f"COPY {events} ({audit_cols}) FROM STDIN"
        self.notify = "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q"
        self.versions = f"SELECT id, version FROM {jobs} WHERE id = ANY(%s::text[])"
        # a rejected report is recorded once per (job, event, fence): repeats coalesce
        self.record = (
            f"INSERT INTO {events} ({audit_cols}) SELECT {audit_cols} FROM ({audit_source}) e "
            f"WHERE EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = e.job_id) "
            f"AND (e.outcome <> 'rejected' OR NOT EXISTS (SELECT 1 FROM {events} x "
            "WHERE x.job_id = e.job_id AND x.outcome = 'rejected' AND x.event = e.event "
            "AND x.fence = e.fence)) ORDER BY e.ord"
        )
        self.renew = (
            f"UPDATE {jobs} AS j SET lease_until = %s, version = j.version + 1, updated_at = %s "
            "FROM unnest(%s::text[], %s::int8[]) AS f(id, fence) "
            "WHERE j.id = f.id AND j.fence = f.fence AND j.owner = %s AND j.state = ANY(%s) "
            "RETURNING j.id, j.state"
        )
        # the owner's latest progress: fenced like renew, but no version bump, no audit
        self.save_progress = (
            f"UPDATE {jobs} AS j SET progress_json = f.progress "
            "FROM unnest(%s::text[], %s::int8[], %s::text[]) AS f(id, fence, progress) "
            "WHERE j.id = f.id AND j.fence = f.fence AND j.owner = %s AND j.state = ANY(%s) "
            "RETURNING j.id"
        )
        self.history = f"SELECT {audit_cols} FROM {events} WHERE job_id = %s ORDER BY seq"
        self.has_entry = (
            f"SELECT count(*) FROM {events} WHERE job_id = %s AND version = %s AND at = %s "
            "AND event = %s AND fence = %s AND data_json = %s"
        )
        self.counts = f"SELECT queue, state, count(*) FROM {jobs} GROUP BY queue, state"
        # the capacity-checked insert: a transaction lock per capped queue (class, key)
        self.capacity_lock = "SELECT pg_advisory_xact_lock(%s, %s)"
        # erase: the job's trail, then each entry's data rewritten (erased_data_json)
        self.trail_data = f"SELECT seq, data_json FROM {events} WHERE job_id = %s"
        self.erase_entry = f"UPDATE {events} SET data_json = %s WHERE job_id = %s AND seq = %s"
        self._claims: dict[ClaimShape, str] = {}
        self._locks: dict[ClaimShape, str] = {}
        self._waiting: dict[tuple[str, ...], str] = {}

    def waiting(self, states: tuple[str, ...]) -> str:
        """Count a queue's jobs in `states`, stopping after %s rows: an index-only scan
        (jobs_state or, for the claimable states, jobs_due), never the table."""
        statement = self._waiting.get(states)
        if statement is None:
            statement = (
                f"SELECT count(*) FROM (SELECT 1 FROM {self.jobs} WHERE queue = %s "
                f"AND state IN ({state_list(states)}) LIMIT %s) AS w"
            )
            self._waiting[states] = statement  # bounded: one per set of waiting states
        return statement

    def apply_changed(
        self,
        columns: tuple[str, ...],
        *,
        batch: bool,
        audited: bool,
        varying: tuple[bool, ...] = (),
        checked: bool = False,
    ) -> str:
        """`apply` / `apply_one` setting only `columns` (the ones the decisions change).

        Parameters: batch, the rows (id, prev_version, *columns) and then the audit
        entries as `batch_rows` takes them, `varying` flagging their columns in that
        order; one decision, the column values, `id`, `prev_version`, then the entry.

        `checked`: the statement answers nothing and fails its transaction (with
        `UNWRITTEN`) unless it wrote as many rows as its last parameter says, so a
        caller that pipelines its commit behind it reads no answer before the commit.
        """
        key = (columns, batch, audited, varying, checked)
        statement = self._changed.get(key)
        if statement is not None:
            return statement
        if not columns or any(c not in JOB_TYPES or c == "id" for c in columns):
            raise BadInput(f"apply: not a set of job columns: {columns!r}")
        jobs, events, audit_cols = self.jobs, self.events, self._audit_cols
        if batch:
            row_types: tuple[tuple[str, str], ...] = (("id", "text"), ("prev_version", "int8"))
            row_types += tuple((c, JOB_TYPES[c]) for c in columns)
            n = len(row_types)
            rows = batch_rows(row_types, varying[:n])
            sets = ", ".join(f"{c} = d.{c}" for c in columns)
            statement = (
                f"WITH d AS ({rows}), "
                f"upd AS (UPDATE {jobs} AS j SET {sets} FROM d "
                "WHERE j.id = d.id AND j.version = d.prev_version RETURNING j.id)"
            )
            if audited:
                entries = batch_rows(tuple(AUDIT_TYPES.items()), varying[n:])
                statement += (
                    f", aud AS (INSERT INTO {events} ({audit_cols}) SELECT {audit_cols} FROM "
                    f"({entries}) e WHERE e.job_id IN (SELECT id FROM upd))"
                )
        else:
            sets = ", ".join(f"{c} = %s::{JOB_TYPES[c]}" for c in columns)
            statement = (
                f"WITH upd AS (UPDATE {jobs} SET {sets} WHERE id = %s AND version = %s "
                "RETURNING id)"
            )
            if audited:
                statement += (
                    f", aud AS (INSERT INTO {events} ({audit_cols}) SELECT * FROM "
                    f"(VALUES ({self._one_entry})) AS e({audit_cols}) "
                    "WHERE EXISTS (SELECT 1 FROM upd))"
                )
        if checked:  # count(*) is no constant: the failing branch runs only when taken
            statement += (
                f" SELECT CASE WHEN count(*) <> %s THEN ('{UNWRITTEN} ' || count(*))::int "
                "ELSE 0 END FROM upd"
            )
        else:
            statement += " SELECT id FROM upd"
        if len(self._changed) >= 256:  # bounded; a few column sets cover the lifecycle
            self._changed.clear()
        self._changed[key] = statement
        return statement

    def audit_insert_rows(self, varying: tuple[bool, ...]) -> str:
        """Insert audit entries given as `batch_rows` takes them (`varying` per column)."""
        statement = self._audits.get(varying)
        if statement is None:
            rows = batch_rows(tuple(AUDIT_TYPES.items()), varying)
            statement = f"INSERT INTO {self.events} ({self._audit_cols}) {rows}"
            self._audits[varying] = statement  # bounded: one per subset of audit columns
        return statement

    def claim(self, key: ClaimShape) -> str:
        """Lease in ONE statement: lock due rows (SKIP LOCKED), update them, return both
        the locked pre-images and the leased rows so the caller can check them
        against the core's `lease` decision before it commits (`key`: see ClaimShape)."""
        if key not in self._claims:
            self._claims[key] = (
                f"WITH locked AS ({self.lock(key)}) "
                f"UPDATE {self.jobs} AS j SET state = 'leased', fence = j.fence + 1, "
                "owner = %(owner)s, lease_until = %(lease_until)s, version = j.version + 1, "
                "updated_at = %(now)s FROM locked WHERE j.id = locked.id "
                f"RETURNING {cols('locked.')}, {cols('j.')}"
            )
        return self._claims[key]

    def lock(self, key: ClaimShape) -> str:
        """The claim's candidates, locked (SKIP LOCKED) and returned unchanged: `claim`
        updates them in the same statement; a claim-and-start lets the core decide
        both steps and writes each row once."""
        if key not in self._locks:
            states, by_ids, one_queue, skipping, by_kind, limited = key
            # one queue: equality lets the planner walk jobs_due in lease order and
            # stop after `limit` rows; several queues: an index scan plus a sort.
            queue = "queue = %(queue)s" if one_queue else "queue = ANY(%(queues)s::text[])"
            due = (
                f"state IN ({state_list(states)}) AND {queue} "
                "AND run_after <= %(now)s AND (deadline IS NULL OR deadline > %(now)s) "
            )
            if skipping:
                due += "AND NOT (id = ANY(%(skip)s::text[])) "
            if by_kind:
                due += "AND kind = ANY(%(kinds)s::text[]) "
            if limited:
                due += "AND NOT (kind = ANY(%(blocked)s::text[])) "
            else:
                due += f"AND NOT EXISTS (SELECT 1 FROM {self.s}.limits) "
            if by_ids:
                # One primary-key lookup per distinct id. With `id = ANY(...)` beside the
                # due conditions, the planner of a young table (no statistics yet) walked
                # jobs_due past every other due job of the queue: 6,000 rows for 32 ids.
                # `(...) IS TRUE` keeps the due conditions out of its index choice.
                locked = (
                    "SELECT l.* FROM (SELECT DISTINCT unnest(%(ids)s::text[]) AS id) AS wanted, "
                    f"LATERAL (SELECT {cols()} FROM {self.jobs} WHERE id = wanted.id "
                    f"AND ({due}) IS TRUE FOR UPDATE SKIP LOCKED) AS l LIMIT %(limit)s"
                )
            else:
                locked = (
                    f"SELECT {cols()} FROM {self.jobs} WHERE {due}"
                    "ORDER BY priority, run_after, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
                )
            self._locks[key] = locked
        return self._locks[key]

    def scan(
        self,
        states: tuple[str, ...],
        *,
        lease: bool,
        deadline: bool,
        host: bool,
        queues: bool,
        kinds: bool,
    ) -> str:
        return self._scan(states, lease, deadline, host, queues, kinds)

    def _scan(  # noqa: PLR0917  (internal: one flag per optional filter)
        self,
        states: tuple[str, ...],
        lease: bool,
        deadline: bool,
        host: bool,
        queues: bool,
        kinds: bool,
    ) -> str:
        where = [f"state IN ({state_list(states)})"]
        if lease:
            where.append("lease_until IS NOT NULL AND lease_until <= %(lease)s")
        if deadline:
            where.append("deadline IS NOT NULL AND deadline <= %(deadline)s")
        if host:
            where.append("owner IS NOT NULL AND (owner::jsonb ->> 'host') = %(host)s")
        if queues:
            where.append("queue = ANY(%(queues)s::text[])")
        if kinds:
            where.append("kind = ANY(%(kinds)s::text[])")
        return (
            f"SELECT {cols()} FROM {self.jobs} WHERE {' AND '.join(where)} "
            "ORDER BY seq LIMIT %(limit)s"
        )

    def prune(
        self,
        states: tuple[str, ...],
        only: bool = False,
        other_than: bool = False,
        held_by: tuple[str, ...] = (),
    ) -> str:
        """`only`: the next parameter lists the queues pruned; `other_than`: the next one
        lists queues left alone (they have a retention of their own); `held_by`: a job
        that a job in these states waits for is kept."""
        state_list(states)
        cutoffs = " OR ".join(f"(state = '{s}' AND finished_at < %s)" for s in states)
        queues = ("AND queue = ANY(%s::text[]) " if only else "") + (
            "AND NOT (queue = ANY(%s::text[])) " if other_than else ""
        )
        if held_by:
            queues += (
                f"AND NOT EXISTS (SELECT 1 FROM {self.s}.job_deps d JOIN {self.jobs} w "
                f"ON w.id = d.job_id WHERE d.after_id = {self.jobs}.id "
                f"AND w.state IN ({state_list(held_by)})) "
            )
        # the last parameters: the seq to go on after (0: from the start), and the limit
        return (
            f"WITH doomed AS (SELECT id FROM {self.jobs} WHERE finished_at IS NOT NULL "
            f"AND ({cutoffs or 'false'}) {queues}AND seq > %s "
            "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED), "
            f"gone AS (DELETE FROM {self.jobs} AS j USING doomed WHERE j.id = doomed.id "
            "RETURNING j.id, j.seq, j.queue, j.state), "
            f"ev AS (DELETE FROM {self.events} AS e USING gone WHERE e.job_id = gone.id), "
            f"deps AS (DELETE FROM {self.s}.job_deps AS x USING gone WHERE x.job_id = gone.id) "
            "SELECT queue, state, count(*), max(seq) FROM gone GROUP BY queue, state"
        )
