"""Broken stores: each breaks one promise the fault suite must catch.

They subclass the reference `MemoryStore` (and, once, the SQLite store) and
change one thing a real store could get wrong. `tests/property/test_mutants.py`
runs the suite against each and expects it to fail with the invariant it breaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from adapters.memory import MemoryStore
from adapters.sqlite.store import SqliteStore
from adapters.sqlite.url import parse_url
from fsm.errors import VersionConflict
from fsm.ports import ClaimRequest, PruneRequest, RenewRequest
from fsm.records import Decision, Job


class NoVersionCheckStore(MemoryStore):
    """apply writes without compare-and-set: a concurrent change is overwritten."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        self._put(d.job)
        if d.entry is not None:
            self._audit[d.job.id].append(d.entry)
        return d.job


class NoFenceRenewStore(MemoryStore):
    """renew extends any lease it is asked to, whatever the fence and the owner."""

    def renew(self, request: RenewRequest) -> dict[str, str]:
        with self._lock:
            renewed: dict[str, str] = {}
            for job_id in request.fences:
                job = self._jobs.get(job_id)
                if job is None or job.state not in request.states:
                    continue
                self._put(
                    attrs.evolve(job, lease_until=request.lease_until, version=job.version + 1)
                )
                renewed[job_id] = job.state
            return renewed


class DoubleLeaseStore(MemoryStore):
    """claim also takes over lapsed leases in place: new owner, same fence, no audit."""

    def claim(self, request: ClaimRequest) -> list[Job]:
        leased = super().claim(request)
        with self._lock:
            for job in list(self._jobs.values()):
                if len(leased) >= request.limit:
                    break
                if (
                    job.state in ("leased", "running")
                    and job.queue in request.queues
                    and job.lease_until is not None
                    and job.lease_until <= request.now
                ):
                    taken = attrs.evolve(
                        job,
                        owner=request.owner,
                        lease_until=request.lease_until,
                        version=job.version + 1,
                    )
                    self._put(taken)
                    leased.append(taken)
        return leased


class UncountedRecoveryStore(MemoryStore):
    """expire is written without its recovery count: crash loops are never bounded."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        if d.event == "expire" and d.previous is not None:
            d = attrs.evolve(d, job=attrs.evolve(d.job, recoveries=d.previous.recoveries))
        return super()._write(d)


class PruneAnythingStore(MemoryStore):
    """prune deletes every job untouched since the oldest cutoff, finished or not."""

    def prune(self, request: PruneRequest) -> int:
        if not request.cutoffs:
            return 0
        cutoff = min(request.cutoffs.values())
        with self._lock:
            doomed = [j.id for j in self._jobs.values() if j.updated_at < cutoff]
            doomed = doomed[: request.limit]
            for job_id in doomed:  # deleted as MemoryStore.prune deletes
                job = self._jobs.pop(job_id)
                self._index(job, None)
                for after in self._deps.pop(job_id, ()):
                    self._dependents.get(after, {}).pop(job_id, None)
                self._audit.pop(job_id, None)
                if job.idempotency_key is not None:
                    self._keys.pop(job.idempotency_key, None)
            return len(doomed)


class PhantomAuditStore(MemoryStore):
    """apply appends the audit entry before its compare-and-set: a lost race leaves it."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        if d.entry is not None:
            self._audit[d.job.id].append(d.entry)
        return super()._write(attrs.evolve(d, entry=None))


class EarlyReleaseStore(MemoryStore):
    """prerequisites reports every prerequisite as succeeded: dependents run too early."""

    def prerequisites(self, job_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        found = super().prerequisites(job_ids)
        return {j: dict.fromkeys(states, "succeeded") for j, states in found.items()}


#: mutant -> the invariant code its failure must name
MUTANTS: dict[type[MemoryStore], str] = {
    NoVersionCheckStore: "I",
    NoFenceRenewStore: "I1",
    DoubleLeaseStore: "I",
    UncountedRecoveryStore: "I",
    PruneAnythingStore: "I3",
    PhantomAuditStore: "I",
    EarlyReleaseStore: "D",
}


def store_classes() -> Sequence[type[MemoryStore]]:
    return tuple(MUTANTS)


class SqlitePruneAnythingStore(SqliteStore):
    """The SQLite store with prune's state filter lost: any job untouched since the cutoff."""

    def prune(self, request: PruneRequest) -> int:
        if not request.cutoffs:
            return 0
        cutoff = min(request.cutoffs.values())
        with self._write("prune") as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM jobs WHERE updated_at < ? LIMIT ?", (cutoff, request.limit)
                ).fetchall()
            ]
            for job_id in ids:
                conn.execute("DELETE FROM job_events WHERE job_id = ?", (job_id,))
                conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        return len(ids)


def sqlite_mutant(path: str) -> SqlitePruneAnythingStore:
    store = SqlitePruneAnythingStore(parse_url(f"sqlite:///{path}?synchronous=NORMAL"))
    store.migrate()
    return store


# --- mutants of production code: patches applied in a copy of the tree -------------
#
# Each names a file of the tree, the text it replaces and the replacement (every
# `old` must occur exactly once). `benchmarks/mutation.py` copies the tree, applies
# one patch, and runs `jobfsm faults` (default size) from the copy against each store
# the mutant applies to: the mutant is killed when the run fails.


@attrs.frozen
class Patch:
    name: str
    area: str
    path: str
    edits: tuple[tuple[str, str], ...]
    stores: tuple[str, ...]
    why: str


ALL_STORES = ("memory", "sqlite", "postgres")
#: a mutant of the RabbitMQ delivery runs `jobfsm faults --delivery amqp://...`
AMQP = ("amqp",)

PATCHES: tuple[Patch, ...] = (
    # --- core: decide and its rules ------------------------------------------------
    Patch(
        "core-retry-deadline-without-delay",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                "return s.job.deadline is None or s.now + s.delay() < s.job.deadline",
                "s.delay()\n    return s.job.deadline is None or s.now < s.job.deadline",
            ),
        ),
        ("memory",),
        "the retry deadline guard forgets the backoff delay: a retry lands past the deadline",
    ),
    Patch(
        "core-expire-running-uncounted",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                's.changes["recoveries"] = s.job.recoveries + 1',
                's.changes["recoveries"] = s.job.recoveries',
            ),
        ),
        ("memory",),
        "expiring a running job does not count the recovery: crash loops are unbounded",
    ),
    Patch(
        "core-backoff-cap-ignored",
        "core",
        "fsm/policies.py",
        (
            (
                "return float(min(self.cap, self.base * self.factor**exponent))",
                "return float(self.base * self.factor**exponent)",
            ),
        ),
        ("memory",),
        "the backoff cap is ignored",
    ),
    Patch(
        "core-unsafe-rerun-on-death",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                "    return s.job.retry_safe\n",
                '    return s.job.retry_safe or s.args.get("verdict") == "dead"\n',
            ),
        ),
        ("memory",),
        "a job that is not retry-safe is re-run when its owner is confirmed dead",
    ),
    Patch(
        "core-attempts-off-by-one",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                "return s.job.attempt < s.job.max_attempts",
                "return s.job.attempt <= s.job.max_attempts",
            ),
        ),
        ("memory",),
        "one attempt more than max_attempts",
    ),
    Patch(
        "core-lease-ignores-deadline",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                "return s.job.deadline is None or s.now < s.job.deadline\n",
                "return True\n",
            ),
        ),
        ("memory",),
        "a job is leased past its deadline",
    ),
    Patch(
        "core-unknown-verdict-read-as-dead",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                'if s.args.get("verdict") == "dead":',
                'if s.args.get("verdict") in ("dead", "unknown"):',
            ),
        ),
        ("memory",),
        "an UNKNOWN liveness verdict takes a valid lease away (fail open)",
    ),
    Patch(
        "core-fence-not-bumped",
        "core",
        "fsm/lifecycle/rules.py",
        (('s.changes["fence"] = s.job.fence + 1', 's.changes["fence"] = s.job.fence'),),
        ("memory",),
        "a lease does not bump the fence: a zombie's reports pass",
    ),
    Patch(
        "core-permanent-retried",
        "core",
        "fsm/lifecycle/rules.py",
        (('return not s.args.get("permanent", False)', "return True"),),
        ("memory",),
        "a permanent failure is retried",
    ),
    Patch(
        "core-stale-fence-accepted",
        "core",
        "fsm/lifecycle/core.py",
        (("if fence != job.fence:", "if fence < job.fence - 1:"),),
        ("memory",),
        "a report one fence behind is accepted",
    ),
    Patch(
        "core-batched-report-takes-the-stored-fence",
        "core",
        "fsm/service/batches.py",
        (
            (
                "            decisions.append(kernel.decide(seen, event, now, **args))",
                "            if reread:\n"
                '                args = {**args, "fence": seen.fence}\n'
                "            decisions.append(kernel.decide(seen, event, now, **args))",
            ),
        ),
        ("memory",),
        "a batched report whose record moved is decided again with the stored fence",
    ),
    # --- maintenance services (fsm/service/maintenance/) and owner judgement -----------
    Patch(
        "recovery-deadline-sweep-skips-leased-running",
        "recovery",
        "fsm/service/maintenance/deadlines.py",
        (
            (
                'states=kernel.spec.sources("deadline"), deadline_passed_at=now, limit=limit',
                "states=tuple(\n"
                "                s\n"
                '                for s in kernel.spec.sources("deadline")\n'
                '                if s not in ("leased", "running")\n'
                "            ),\n"
                "            deadline_passed_at=now,\n"
                "            limit=limit,",
            ),
        ),
        ("memory",),
        "the deadline sweep skips leased and running jobs",
    ),
    Patch(
        "recovery-deadline-sweep-late",
        "recovery",
        "fsm/service/maintenance/deadlines.py",
        (
            (
                'deadline"), deadline_passed_at=now, limit=limit',
                'deadline"), deadline_passed_at=now - 60.0, limit=limit',
            ),
        ),
        ("memory",),
        "the deadline sweep fails jobs a minute after their deadline",
    ),
    Patch(
        "recovery-verdict-applied-by-rereading",
        "recovery",
        "fsm/service/maintenance/rescue.py",
        (
            (
                'new = decide_seen(kernel, job, "expire", **args)',
                'new = decide_seen(kernel, kernel.store.get(job.id) or job, "expire", **args)',
            ),
        ),
        ("memory",),
        "a death verdict is applied by re-reading the job, not by compare-and-set on the "
        "version judged",
    ),
    Patch(
        "reconcile-failure-read-as-not-started",
        "recovery",
        "fsm/service/reconcile.py",
        (
            (
                'return unknown(), clean_text(f"raised {type(err).__name__}: {err}")[:500]',
                "return not_started(), None",
            ),
        ),
        ("memory",),
        "a reconciler that raised is read as 'the outside call never happened': a lost run "
        "that charged is run again",
    ),
    Patch(
        "owner-probe-failure-read-as-dead",
        "owner",
        "fsm/service/identity.py",
        (
            (
                'return Verdict(Status.UNKNOWN, f"liveness probe failed: {err}")',
                'return Verdict(Status.DEAD, f"liveness probe failed: {err}")',
            ),
        ),
        ("memory",),
        "a liveness probe that fails is read as DEAD (fail open)",
    ),
    # --- executors -----------------------------------------------------------------
    Patch(
        "executor-restart-delivers-late-results",
        "executors",
        "adapters/in_flight.py",
        (
            (
                "live = gen is self._gen and gen.pop(token) is not None",
                "live = gen.pop(token) is not None or record.abandoned",
            ),
        ),
        ("memory",),
        "a thread executor restart leaves the old generation's results deliverable",
    ),
    # --- memory store --------------------------------------------------------------
    Patch(
        "memory-renew-keeps-version",
        "memory",
        "adapters/memory.py",
        (("version=job.version + 1,", "version=job.version,"),),
        ("memory",),
        "a heartbeat renewal does not bump the version",
    ),
    Patch(
        "memory-apply-without-cas",
        "memory",
        "adapters/memory.py",
        (("if current is None or current.version != d.previous.version:", "if current is None:"),),
        ("memory",),
        "apply writes without compare-and-set on the version",
    ),
    Patch(
        "memory-deadline-scan-skips-owned",
        "memory",
        "adapters/memory.py",
        (
            (
                "                if request.deadline_passed_at is not None and not (\n",
                "                if request.deadline_passed_at is not None and j.state in "
                '("leased", "running"):\n                    continue\n'
                "                if request.deadline_passed_at is not None and not (\n",
            ),
        ),
        ("memory",),
        "the deadline scan skips leased and running jobs",
    ),
    Patch(
        "memory-write-drops-progress",
        "memory",
        "adapters/memory.py",
        (
            (
                "        if d.job.progress_json == d.previous.progress_json"
                " != current.progress_json:\n"
                "            # the owner's latest progress: no decision writes it (but erase)\n"
                "            self._put(attrs.evolve(d.job, progress_json=current.progress_json))\n"
                "        else:\n"
                "            self._put(d.job)\n",
                "        self._put(d.job)\n",
            ),
        ),
        ("memory",),
        "a decision read before a progress save writes the older progress back "
        "(blind study, issue 36)",
    ),
    # --- SQLite store --------------------------------------------------------------
    Patch(
        "sqlite-begin-deferred",
        "sqlite",
        "adapters/sqlite/store.py",
        (('conn.execute("BEGIN IMMEDIATE")', 'conn.execute("BEGIN")'),),
        ("sqlite",),
        "write transactions start with BEGIN, not BEGIN IMMEDIATE",
    ),
    Patch(
        "sqlite-renew-keeps-version",
        "sqlite",
        "adapters/sqlite/store.py",
        (
            (
                "SET lease_until = ?, version = version + 1, updated_at = ?",
                "SET lease_until = ?, updated_at = ?",
            ),
        ),
        ("sqlite",),
        "a heartbeat renewal does not bump the version",
    ),
    Patch(
        "sqlite-apply-without-cas",
        "sqlite",
        "adapters/sqlite/sql.py",
        (
            (
                'return f"UPDATE jobs SET {sets} WHERE id = ? AND version = ?"',
                'return f"UPDATE jobs SET {sets} WHERE id = ? AND ? IS NOT NULL"',
            ),
        ),
        ("sqlite",),
        "apply (one decision or a batch) writes without the version check",
    ),
    Patch(
        "sqlite-audit-second-transaction",
        "sqlite",
        "adapters/sqlite/store.py",
        (
            (
                "                if entry is not None:\n"
                "                    conn.execute(AUDIT_INSERT, entry)\n"
                "                out.append(d.job)\n"
                "        return out\n",
                "                out.append(d.job)\n"
                "        written = {j.id for j in out if isinstance(j, Job)}\n"
                "        entries = [\n"
                "            e for d, (_, e) in zip(decisions, prepared, strict=True)\n"
                "            if e is not None and d.job.id in written\n"
                "        ]\n"
                "        if entries:\n"
                '            with self._write("apply audit") as conn:\n'
                "                for entry in entries:\n"
                "                    conn.execute(AUDIT_INSERT, entry)\n"
                "        return out\n",
            ),
        ),
        ("sqlite",),
        "apply writes the audit entries in a second transaction",
    ),
    Patch(
        "sqlite-deadline-scan-skips-owned",
        "sqlite",
        "adapters/sqlite/store.py",
        (
            (
                'where.append("deadline IS NOT NULL AND deadline <= ?")',
                'where.append("deadline IS NOT NULL AND deadline <= ? '
                "AND state NOT IN ('leased', 'running')\")",
            ),
        ),
        ("sqlite",),
        "the deadline scan skips leased and running jobs",
    ),
    # --- PostgreSQL store ----------------------------------------------------------
    Patch(
        "postgres-claim-without-row-locks",
        "postgres",
        "adapters/postgres/_sql.py",
        (
            (
                '"ORDER BY priority, run_after, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"',
                '"ORDER BY priority, run_after, id LIMIT %(limit)s"',
            ),
        ),
        ("postgres",),
        "claim selects its candidates without FOR UPDATE SKIP LOCKED",
    ),
    Patch(
        "postgres-renew-keeps-version",
        "postgres",
        "adapters/postgres/_sql.py",
        (
            (
                "SET lease_until = %s, version = j.version + 1, updated_at = %s",
                "SET lease_until = %s, updated_at = %s",
            ),
        ),
        ("postgres",),
        "a heartbeat renewal does not bump the version",
    ),
    Patch(
        "postgres-batched-apply-without-cas",
        "postgres",
        "adapters/postgres/_sql.py",
        (
            (
                '"WHERE j.id = d.id AND j.version = d.prev_version RETURNING j.id), "',
                '"WHERE j.id = d.id AND d.prev_version IS NOT NULL RETURNING j.id), "',
            ),
            (
                '"WHERE j.id = d.id AND j.version = d.prev_version RETURNING j.id)"\n',
                '"WHERE j.id = d.id AND d.prev_version IS NOT NULL RETURNING j.id)"\n',
            ),
        ),
        ("postgres",),
        "a batched apply writes without the version check",
    ),
    Patch(
        "postgres-audit-second-statement",
        "postgres",
        "adapters/postgres/ops.py",
        (
            (
                "    body = ids(Run(*apply_statement(t.sql, decisions)))\n",
                "    bare = [attrs.evolve(d, entry=None) for d in decisions]\n"
                "    body = ids(Run(*apply_statement(t.sql, bare)))\n",
            ),
            (
                "    return (yield from outcomes(t, decisions, written))\n",
                "    entries = [d.entry for d in decisions if d.entry and d.job.id in written]\n"
                "    if entries:\n"
                "        yield Run(t.sql.record, audit_arrays(entries), fetch=False)\n"
                "    return (yield from outcomes(t, decisions, written))\n",
            ),
            ("from fsm.errors import", "import attrs\n\nfrom fsm.errors import"),
        ),
        ("postgres",),
        "apply writes the audit entries in a second statement (its own transaction)",
    ),
    Patch(
        "postgres-deadline-scan-skips-owned",
        "postgres",
        "adapters/postgres/_sql.py",
        (
            (
                'where.append("deadline IS NOT NULL AND deadline <= %(deadline)s")',
                'where.append("deadline IS NOT NULL AND deadline <= %(deadline)s '
                "AND state NOT IN ('leased', 'running')\")",
            ),
        ),
        ("postgres",),
        "the deadline scan skips leased and running jobs",
    ),
    # --- worker ----------------------------------------------------------------------
    Patch(
        "worker-gives-up-after-two-ttls",
        "worker",
        "fsm/worker/leases.py",
        (
            (
                "if time.monotonic() - last_ok >= max(interval, ttl - interval):",
                "if time.monotonic() - last_ok >= 2 * ttl:",
            ),
        ),
        ("memory",),
        "a worker whose heartbeats fail keeps its runs for two lease TTLs (others took them)",
    ),
    Patch(
        "hold-after-claiming",
        "worker",
        "fsm/worker/claims.py",
        (
            (
                "            s.identity.hold_many([(job.id, job.fence) for job in jobs])\n"
                "        return jobs\n",
                "        s.identity.hold_many([(job.id, job.fence) for job in jobs])\n"
                "        return jobs\n",
            ),
        ),
        ("memory",),
        "a worker registers its claimed runs as held only after its claim stops counting as "
        "in flight: a sweep of its own process in between judges them dead and runs them twice",
    ),
    Patch(
        "reports-payload-limit-inclusive",
        "worker",
        "fsm/worker/reports.py",
        (
            (
                'if len(result.encode("utf-8")) > limit:',
                'if len(result.encode("utf-8")) >= limit:',
            ),
        ),
        ("memory",),
        "the reporter fails a result of exactly the payload limit permanently (off by one)",
    ),
    Patch(
        "reports-cancel-refusal-not-acknowledged",
        "worker",
        "fsm/worker/reports.py",
        (
            (
                "        if cancelled:\n            self._acknowledge(cancelled)\n",
                "        for run in cancelled:\n            s.runs.finish(run)\n",
            ),
        ),
        ("memory",),
        "a report refused because a cancel arrived meanwhile is dropped, not acknowledged: "
        "the job stays cancelling until recovery",
    ),
    Patch(
        "reports-store-away-runs-kept",
        "worker",
        "fsm/worker/reports.py",
        (
            (
                "            s.runs.finish_many(runs, abandoned="
                '"the result could not be reported")\n',
                "",
            ),
        ),
        ("memory",),
        "when the store stays away past the bound the reporter gives up without finishing the "
        "runs: they stay registered (held, heartbeated) forever",
    ),
    Patch(
        "reports-lease-lost-run-kept",
        "worker",
        "fsm/worker/reports.py",
        (
            (
                "                observers.on_lease_lost(run.job.kind)\n",
                "                observers.on_lease_lost(run.job.kind)\n                continue\n",
            ),
        ),
        ("memory",),
        "a report refused for a lost lease leaves its run registered: the worker keeps "
        "holding a run another owner has",
    ),
    Patch(
        "reports-retry-delay-dropped",
        "worker",
        "fsm/worker/reports.py",
        (
            (
                'return "fail", {"fence": fence, "error": outcome.error, "delay": outcome.delay}',
                'return "fail", {"fence": fence, "error": outcome.error}',
            ),
        ),
        ("memory",),
        "Retry(after=) reaches the store without its delay: the backoff policy decides instead",
    ),
    Patch(
        "progress-saved-before-the-write",
        "worker",
        "fsm/worker/saving.py",
        (
            (
                "    try:\n        written = s.engine.save_progress(",
                "    for run, seq in taken.values():\n"
                "        run.progress_saved = seq\n"
                "    try:\n        written = s.engine.save_progress(",
            ),
            (
                "    for job_id in written:\n"
                "        run, seq = taken[job_id]\n"
                "        run.progress_saved = seq\n",
                "",
            ),
        ),
        ("memory", "sqlite"),
        "the worker marks progress saved before the store wrote it: a write that fails is "
        "never tried again and the handler's latest progress is lost (blind study, issue 36)",
    ),
    # --- paused queues (the pauses model) ----------------------------------------------
    Patch(
        "pauses-own-pause-not-seen",
        "pauses",
        "fsm/service/pausing.py",
        (
            (
                "        store.pause_queue(pause)\n        self._changed()\n",
                "        store.pause_queue(pause)\n",
            ),
        ),
        ("memory", "sqlite"),
        "the engine that paused a queue keeps its cached pauses: it leases the queue's jobs "
        "for up to a second more (blind study, issue 36)",
    ),
    Patch(
        "pauses-read-older-than-own-change-kept",
        "pauses",
        "fsm/service/pausing.py",
        (
            (
                "                if self._changes == changes:",
                "                if True:",
            ),
        ),
        ("memory",),
        "a read of the pauses that began before its engine's own pause is kept after it: the "
        "pausing engine leases the queue's jobs for up to a second more",
    ),
    Patch(
        "pauses-seen-after-the-bound",
        "pauses",
        "fsm/service/pausing.py",
        (
            (
                "tick - read_at >= PAUSE_SEEN_WITHIN",
                "tick - read_at > PAUSE_SEEN_WITHIN",
            ),
        ),
        ("memory",),
        "an engine re-reads the pauses only after the documented bound has passed: a claim "
        "exactly PAUSE_SEEN_WITHIN after a pause still leases the queue's jobs",
    ),
    # --- RabbitMQ delivery -----------------------------------------------------------
    Patch(
        "rabbitmq-ack-on-hand-out",
        "rabbitmq",
        "adapters/rabbitmq/consumer.py",
        (
            (
                "                out.append(item)\n            return out\n",
                "                out.append(item)\n"
                "            for item in out:\n"
                "                self.ack(item.token)\n"
                "            return out\n",
            ),
        ),
        AMQP,
        "a wake-up is acked when handed to the worker, before its lease commits",
    ),
    Patch(
        "rabbitmq-multiple-ack-below-unsettled",
        "rabbitmq",
        "adapters/rabbitmq/settling.py",
        (("floor = min(held, default=tags[-1] + 1)", "floor = tags[-1] + 1"),),
        AMQP,
        "a batched ack covers deliveries the worker has not settled yet",
    ),
    Patch(
        "rabbitmq-outbox-failure-forgotten",
        "rabbitmq",
        "adapters/rabbitmq/outbox.py",
        (
            (
                "                        self.failed += len(batch)\n"
                "                        self.lost.extend(job.id for job in batch)\n",
                "                        self.failed += len(batch)\n",
            ),
        ),
        AMQP,
        "an outbox batch whose publish failed is not kept for the repair sweep: its jobs "
        "wait for repair_after instead of the next sweep",
    ),
    # --- dependencies (docs/dependencies.md) -------------------------------------------
    Patch(
        "core-release-on-any-success",
        "core",
        "fsm/lifecycle/prerequisites.py",
        (
            (
                "return all(v == PREREQUISITE_SUCCEEDED for v in",
                "return any(v == PREREQUISITE_SUCCEEDED for v in",
            ),
        ),
        ("memory",),
        "a waiting job is let go when one of its prerequisites succeeded, not all",
    ),
    Patch(
        "sqlite-prerequisites-not-stored",
        "sqlite",
        "adapters/sqlite/deps.py",
        (
            (
                '        "INSERT OR IGNORE INTO job_deps (job_id, after_id) VALUES (?, ?)",\n'
                "        [(job_id, a) for a in after],",
                '        "INSERT OR IGNORE INTO job_deps (job_id, after_id) VALUES (?, ?)",\n'
                "        [(job_id, a) for a in after][:0],",
            ),
        ),
        ("sqlite",),
        "insert checks a job's prerequisites but does not store them",
    ),
    # --- issue 36: the mechanisms the fault suite did not model before ------------------
    Patch(
        "recovery-names-only-a-running-owner",
        "core",
        "fsm/lifecycle/rules.py",
        (
            (
                '    if s.job.owner is not None:\n        s.data["lost_owner"]',
                '    if s.job.owner is not None and s.job.state == "running":\n'
                '        s.data["lost_owner"]',
            ),
        ),
        ("memory",),
        "a recovery names the owner that lost the run only when it lost a running job: "
        "the recovery of a lease that never started, or of a cancelling or reconciling "
        "run, says nothing of who lost it (the Workers page loses it)",
    ),
    Patch(
        "worker-sweep-ignores-claim-in-flight",
        "owner",
        "fsm/service/identity.py",
        (
            (
                "                    if run in self._held or self._claiming:\n",
                "                    if run in self._held:\n",
            ),
        ),
        ("memory",),
        "a process judges its own runs by its registry alone, not by a claim in flight: a "
        "sweep between a claim's commit and its registration expires the runs just claimed "
        "(blind study, issue 36)",
    ),
    Patch(
        "recheck-claim-not-held",
        "reconcile",
        "fsm/service/maintenance/lost_runs.py",
        (
            (
                "                self.identity.hold(claimed.id, claimed.fence)\n"
                "                asked += self._ask(claimed)\n",
                "                asked += self._ask(claimed)\n",
            ),
        ),
        ("memory", "sqlite"),
        "a recheck claim of a lost run is not registered as held: while its reconciler "
        "answers in the background, the process's own next sweep sends the job to "
        "investigate (blind study, issue 36)",
    ),
    Patch(
        "registry-drop-by-job-id",
        "registry",
        "fsm/service/identity.py",
        (
            (
                "                self._held.discard(run)\n",
                "                self._held = {k for k in self._held if k[0] != run[0]}\n",
            ),
        ),
        ("memory",),
        "the held-run registry forgets a run by job id only: ending an old run forgets the "
        "newer run of the same job, which the worker's own sweep then expires",
    ),
    Patch(
        "reconcile-answer-under-current-fence",
        "reconcile",
        "fsm/service/maintenance/lost_runs.py",
        (
            (
                "                    job.fence,\n                    answer.answer,\n",
                "                    getattr(kernel.store.get(job.id), 'fence', job.fence),\n"
                "                    answer.answer,\n",
            ),
        ),
        ("memory",),
        "a reconciler's answer is recorded under the job's current fence: an answer that "
        "arrives after its claim moved wins",
    ),
    Patch(
        "postgres-unknown-commit-taken-as-own",
        "async",
        "adapters/postgres/plan.py",
        (
            (
                "        if stored.get(d.job.id) == d.job:\n",
                "        if getattr(stored.get(d.job.id), 'version', -1) >= d.job.version:\n",
            ),
        ),
        ("postgres",),
        "after a broken connection, a write is taken as committed when the row is at or past "
        "its version (another writer's change is read as its own)",
    ),
    Patch(
        "aio-insert-drops-capacity",
        "async",
        "adapters/postgres/aio.py",
        (
            (
                'return await self.run(inserts.insert(self.target, decisions, capacity), "insert")',
                'return await self.run(inserts.insert(self.target, decisions, None), "insert")',
            ),
        ),
        ("postgres",),
        "the asyncio store's insert drops the queue capacity: async submits overfill a "
        "queue that sync submits respect",
    ),
    Patch(
        "aio-pool-turn-kept-on-error",
        "async",
        "adapters/postgres/aio.py",
        (
            (
                "                    yield conn\n"
                "            finally:\n"
                "                self.gate.release()\n",
                "                    yield conn\n"
                "                self.gate.release()\n"
                "            finally:\n"
                "                pass\n",
            ),
        ),
        ("postgres",),
        "the asyncio store keeps its pool turn when a call raises: after pool_max failed "
        "calls every AsyncEngine call waits for a turn until it times out (second blind "
        "study, issue 36)",
    ),
    Patch(
        "schedules-last-tick-to-pass-time",
        "schedules",
        "fsm/service/maintenance/ticks.py",
        (
            (
                "        tick = handled if handled is not None else record.last_tick\n",
                "        tick = now if handled is not None else record.last_tick\n",
            ),
        ),
        ("memory",),
        "the last tick is advanced to the pass's time, not the newest tick submitted: "
        "ticks the per-pass bound left are lost",
    ),
    Patch(
        "schedules-catch-up-one-short",
        "schedules",
        "fsm/service/timetable.py",
        (
            (
                'keep = s.catch_up if s.missed == "catch_up" else 0',
                'keep = s.catch_up - 1 if s.missed == "catch_up" else 0',
            ),
        ),
        ("memory",),
        "catch_up runs one missed tick fewer than the policy says",
    ),
    Patch(
        "postgres-claim-by-ids-ignores-kinds",
        "kinds",
        "adapters/postgres/_sql.py",
        (
            (
                'f"AND ({due}) IS TRUE FOR UPDATE SKIP LOCKED) AS l LIMIT %(limit)s"',
                "f\"AND ({due.replace('AND kind = ANY(%(kinds)s::text[]) ', '')}) IS TRUE \"\n"
                '                    "FOR UPDATE SKIP LOCKED) AS l LIMIT %(limit)s"',
            ),
        ),
        ("postgres",),
        "a claim by ids ignores the kinds filter: a worker leases a job it has no handler for",
    ),
    Patch(
        "sqlite-claim-by-ids-ignores-kinds",
        "kinds",
        "adapters/sqlite/store.py",
        (
            (
                '    if request.kinds is not None:\n        where.append(f"kind IN',
                "    if request.kinds is not None and request.ids is None:\n"
                '        where.append(f"kind IN',
            ),
        ),
        ("sqlite",),
        "a claim by ids ignores the kinds filter",
    ),
    Patch(
        "session-submit-outside-its-transaction",
        "transactions",
        "fsm/service/connections.py",
        (
            (
                "        conn = conn.connection()  # the session's Connection, in its "
                "transaction\n",
                "        conn = conn.get_bind().connect()  # a Connection of the engine\n",
            ),
        ),
        ("sqlite",),
        "a submit on a SQLAlchemy Session joins a new connection of its engine, not the "
        "session's transaction: the session's commit does not commit the job",
    ),
    Patch(
        "memory-claim-priority-ignored",
        "kinds",
        "adapters/memory.py",
        (("key=lambda j: (j.priority, j.run_after, j.id),", "key=lambda j: (j.run_after, j.id),"),),
        ("memory",),
        "a claim takes due jobs by age, not by priority",
    ),
    # --- flow control: global limits (issue 33, the limits model) -------------------
    Patch(
        "limits-claim-ignores-concurrency-by-one",
        "limits",
        "fsm/lifecycle/limits.py",
        (("limit.concurrency - held)", "limit.concurrency - held + 1)"),),
        ("memory", "sqlite"),
        "a claim leases one job more than a concurrency limit allows: N+1 hold a slot",
    ),
    Patch(
        "limits-rate-count-off-by-one",
        "limits",
        "fsm/lifecycle/limits.py",
        (("limit.rate - recent)", "limit.rate - recent + 1)"),),
        ("memory",),
        "a claim grants one lease more than a rate allows within its window",
    ),
    Patch(
        "limits-rate-window-short",
        "limits",
        "fsm/lifecycle/limits.py",
        (("return now - limit.period", "return now - limit.period * 0.999"),),
        ("memory",),
        "the rate window is a little shorter than its period: a lease just before the end "
        "of the period is not counted",
    ),
    Patch(
        "limits-claim-stops-at-a-held-back-job",
        "limits",
        "adapters/claiming.py",
        (("        if not held_back or len(rows) < wanted:\n            break", "        break"),),
        ("memory",),
        "a claim under limits stops after its first round: a limited kind at the head of "
        "the queue blocks the other kinds behind it",
    ),
    Patch(
        "postgres-limits-gate-ignores-leases-since",
        "limits",
        "adapters/postgres/limits.py",
        (('"AND l.leased >= g.leased AND l.leased - g.leased <= g.allowed)"', '"AND true)"'),),
        ("postgres",),
        "a PostgreSQL claim counted ahead of the key locks commits without checking the "
        "leases granted since its count: racing claimers each lease the room they counted",
    ),
    Patch(
        "postgres-limits-gate-on-held-back-keys",
        "limits",
        "adapters/postgres/limits.py",
        (
            (
                "        under = [lim for lim in counting.limits if granted[lim.key]]",
                "        under = [lim for lim in counting.limits if not granted[lim.key]]",
            ),
        ),
        ("postgres",),
        "a PostgreSQL claim counted ahead of the key locks checks, at its commit, the limits "
        "of the kinds it held back instead of those it leased under: racing claimers each "
        "lease the room they counted",
    ),
    Patch(
        "postgres-limits-stale-spent-guess",
        "limits",
        "adapters/postgres/limits.py",
        (("                    and set(counting.guess) <= set(blocked)\n", ""),),
        ("postgres",),
        "a PostgreSQL claim keeps the candidates it fetched leaving out the kinds its "
        "handle last found spent, although one of them has room now: a due job of that "
        "kind is passed over while the claim leases fewer than it asked",
    ),
    Patch(
        "postgres-limits-kept-count-taken-as-new",
        "limits",
        "adapters/postgres/limits.py",
        (
            (
                "                kept[lim.key] = count\n",
                "                kept[lim.key] = attrs.evolve(\n"
                "                    count, leased=leased.get(lim.key, 0)\n"
                "                )\n",
            ),
        ),
        ("postgres",),
        "a PostgreSQL claim within its handle's last count takes that count as made at the "
        "totals it just read: the leases granted since the count are forgotten, by its "
        "budget and by its commit's check, and a kind runs past its limit",
    ),
    Patch(
        "postgres-limits-locked-claims-not-totalled",
        "limits",
        "adapters/postgres/limits.py",
        (
            (
                "        if bumps or gated:  # the keys' running totals",
                "        if gated:  # the keys' running totals",
            ),
        ),
        ("postgres",),
        "a PostgreSQL claim counted under the key locks (a worker's first claim, or one "
        "whose check failed) leaves the keys' running totals as they were: the claims "
        "of other workers within their kept counts never learn of its leases, and a "
        "kind runs past its limit when a worker starts while others claim",
    ),
    Patch(
        "postgres-limits-other-queue-starved",
        "limits",
        "adapters/postgres/claim.py",
        (
            (
                "limited = not rows and (bool(found) or bool(request.caps))",
                "limited = not rows and (bool(limits) or bool(request.caps))",
            ),
        ),
        ("postgres",),
        "a PostgreSQL claim of a queue no limit names leases nothing while another queue "
        "has a limit (the plain statement refuses while any limit is stored)",
    ),
    Patch(
        "postgres-limits-window-rows-deleted-inside",
        "limits",
        "adapters/postgres/limits.py",
        (
            (
                '"AND l.at <= (SELECT b.start FROM bumped AS b WHERE b.key = l.key) "',
                '"AND l.at <= (SELECT b.start + 1e9 FROM bumped AS b WHERE b.key = l.key) "',
            ),
            (
                '"AND l.at <= (SELECT max(b.start) FROM bumped AS b) "',
                '"AND l.at <= (SELECT max(b.start) + 1e9 FROM bumped AS b) "',
            ),
        ),
        ("postgres",),
        "the claim that forgets a rate window's old rows (one per min(R, 1024) leases of "
        "the key) deletes the key's rows inside the window too: the next claims count "
        "too few leases in the window, and a kind is leased past its rate",
    ),
    Patch(
        "rate-marks-kind-only",
        "limits",
        "adapters/claiming.py",
        (
            (
                "return [(k, now) for job in jobs for k in job_keys(job) if k in rated]",
                "return [(k, now) for job in jobs for k in job_keys(job)[:1] if k in rated]",
            ),
        ),
        ("memory",),
        "a claim marks each lease in its kind's rate window only, never its queue's: a "
        "queue's rate limit never binds (outside study, issue 36)",
    ),
    Patch(
        "worker-caps-ignore-holding",
        "limits",
        "fsm/service/limits.py",
        (
            (
                "return {key: max(0, n - holding.get(key, 0)) for key, n in limits.items()}",
                "return {key: max(0, n) for key, n in limits.items()}",
            ),
        ),
        ("memory",),
        "a worker's caps (`jobfsm worker --limit kind=N`) forget the jobs it holds: each "
        "claim may lease N more, and the worker holds far more than N (outside study, "
        "issue 36)",
    ),
    # --- unique submits (issue 33 item 3, the unique model) ---------------------------
    Patch(
        "unique-live-scope-drops-retry-wait",
        "unique",
        "fsm/lifecycle/unique.py",
        (
            (
                "    return tuple(s for s in lc.states if not lc.is_final(s))",
                "    return tuple(s for s in lc.states"
                ' if not lc.is_final(s) and s != "retry_wait")',
            ),
        ),
        ("memory", "sqlite"),
        "the live scope forgets retry_wait: a submit while its key's job waits to retry "
        "stores a second live job",
    ),
    Patch(
        "unique-window-closed-at-its-end",
        "unique",
        "fsm/records.py",
        (
            (
                "            and job.created_at > self.since",
                "            and job.created_at >= self.since",
            ),
        ),
        ("memory",),
        "a time window holds a job made exactly `period` ago: one per hour becomes one per "
        "hour and a moment",
    ),
    # --- automatic retention (issue 33, docs/retention.md) ---------------------------
    Patch(
        "retention-lease-ignores-expiry",
        "retention",
        "adapters/memory_services.py",
        (
            (
                "if held is not None and held.owner != owner and held.until > now:",
                "if held is not None and held.owner != owner:",
            ),
        ),
        ("memory",),
        "the service lease never expires: a killed holder keeps retention from every worker",
    ),
    Patch(
        "sqlite-retention-lease-ignores-holder",
        "retention",
        "adapters/sqlite/services.py",
        (
            (
                '"WHERE service_leases.owner = excluded.owner OR service_leases.until <= ?"',
                '"WHERE ? IS NOT NULL"',
            ),
        ),
        ("sqlite",),
        "the service lease's compare-and-set ignores its holder and expiry: two workers prune",
    ),
    Patch(
        "postgres-retention-lease-ignores-expiry",
        "retention",
        "adapters/postgres/services.py",
        (
            (
                '"WHERE held.owner = excluded.owner OR held.until <= %s RETURNING owner"',
                '"WHERE held.owner = excluded.owner AND %s IS NOT NULL RETURNING owner"',
            ),
        ),
        ("postgres",),
        "the service lease never expires on PostgreSQL: a killed holder keeps it forever",
    ),
    Patch(
        "retention-age-of-the-shortest-state",
        "retention",
        "fsm/service/maintenance/retention.py",
        (
            (
                "            s: now - keep\n",
                "            s: now - min(k for k in rule.values() if k is not None)\n",
            ),
        ),
        ("memory",),
        "every finished state is cut off at the shortest retention of any state",
    ),
    Patch(
        "retention-pass-unbounded",
        "retention",
        "fsm/service/maintenance/retention.py",
        (("            while self.batches < plan.max_batches:", "            while True:"),),
        ("memory",),
        "a retention pass runs batches until nothing is due, past its bound",
    ),
    Patch(
        "retention-metrics-count-the-last-batch",
        "retention",
        "fsm/service/maintenance/retention.py",
        (
            (
                "                pruned[key] = pruned.get(key, 0) + n\n",
                "                pruned[key] = n\n",
            ),
        ),
        ("memory",),
        "a pass's metrics count, per queue and state, only its last batch's deletions",
    ),
    Patch(
        "retention-override-not-held",
        "retention",
        "fsm/service/maintenance/retention.py",
        (
            (
                "PruneRequest(cutoffs=cutoffs(merged), limit=limit, queues=(queue,), held_by=held)",
                "PruneRequest(cutoffs=cutoffs(merged), limit=limit, queues=(queue,))",
            ),
        ),
        ("memory",),
        "a queue with a retention of its own prunes the prerequisites of its waiting jobs, "
        "which then fail as gone (outside study, issue 36)",
    ),
    Patch(
        "memory-prune-ignores-other-than",
        "retention",
        "adapters/memory.py",
        (("                and j.queue not in request.other_than\n", ""),),
        ("memory",),
        "the memory store's default retention rule prunes the queues that have a rule of "
        "their own (outside study, issue 36)",
    ),
    Patch(
        "postgres-prerequisites-drop-pruned",
        "retention",
        "adapters/postgres/deps.py",
        (
            (
                'f"LEFT JOIN {jobs} j ON j.id = d.after_id',
                'f"JOIN {jobs} j ON j.id = d.after_id',
            ),
        ),
        ("postgres",),
        "PostgreSQL's prerequisites read drops a pruned prerequisite (an inner join): a "
        "requeued dependent of a pruned job is released on the others, or never judged "
        "when all are gone (second blind study, issue 36)",
    ),
    # --- typed payloads (issue 33 item 5, docs/typed-payloads.md) ----------------------
    Patch(
        "payloads-int-takes-a-bool",
        "payloads",
        "fsm/payloads.py",
        (
            (
                "int, _strict(int, lambda v: isinstance(v, int) and not isinstance(v, bool))",
                "int, _strict(int, lambda v: isinstance(v, int))",
            ),
        ),
        ("memory",),
        "a field typed int takes true and false (a bool is an int in Python, not in JSON)",
    ),
    Patch(
        "payloads-extra-keys-ignored",
        "payloads",
        "fsm/payloads.py",
        (("make_converter(forbid_extra_keys=True)", "make_converter(forbid_extra_keys=False)"),),
        ("memory",),
        "keys that are not fields of an attrs payload type are dropped, not refused",
    ),
    Patch(
        "payload-instance-unchecked",
        "payloads",
        "fsm/payloads.py",
        (
            (
                "        from_data(tp, data, what)\n        return data\n",
                "        return data\n",
            ),
        ),
        ("memory",),
        "a typed payload given as an attrs instance is stored without checking its fields' "
        "types (attrs checks none at construction): the handler fails later (outside "
        "study, issue 36)",
    ),
    Patch(
        "memory-schedule-advance-unchecked",
        "schedules",
        "adapters/memory_schedules.py",
        (("if old is None or old.last_tick != expected:", "if old is None:"),),
        ("memory",),
        "a schedule's last tick is advanced without its compare-and-set: a scheduler that "
        "stalled past its lead records what it read over a newer pass's, moving the last "
        "tick back, and the ticks in between are submitted again (study mutant 04)",
    ),
    Patch(
        "sqlite-schedule-checked-at-as-given",
        "schedules",
        "adapters/sqlite/schedules.py",
        (("checked_at = max(coalesce(checked_at, ?), ?) ", "checked_at = coalesce(?, ?) "),),
        ("sqlite",),
        "a schedule's pass time is written as the pass gives it: a pass held past a newer "
        "one records its older time, the schedule looks unattended since then, and the next "
        "pass skips as missed ticks a scheduler was there to run",
    ),
    Patch(
        "postgres-claim-ahead-misses-a-new-limit",
        "postgres",
        "adapters/postgres/claim.py",
        (
            (
                "                if counting is not None and limits != expected:\n"
                "                    raise _LimitsChanged  # rolled back below; counted again "
                "under these\n",
                "",
            ),
        ),
        ("postgres",),
        "a claim counted ahead under the limits its handle last read goes on when the "
        "limits it reads with its counts differ (the developer trusted the commit's gate, "
        "which checks only the limits counted): a limit set since on another key is not "
        "counted, and the claim leases past it (third blind study, mutant 10, settled)",
    ),
    # --- the fourth blind study's misses (08, 11) --------------------------------------
    Patch(
        "sqlite-schedule-first-advance-never-matches",
        "schedules",
        "adapters/sqlite/schedules.py",
        (('"WHERE name = ? AND last_tick IS ?"', '"WHERE name = ? AND last_tick = ?"'),),
        ("sqlite",),
        "a schedule's compare-and-set compares its last tick with `=`: a schedule that never "
        "ticked (NULL) is never recorded, so every pass takes its ticks as due again (the "
        "idempotency keys hide it while the jobs are stored) and its pass time never moves "
        "(fourth blind study, mutant 08)",
    ),
    Patch(
        "postgres-scheduler-lead-compared-backwards",
        "schedules",
        "adapters/postgres/schedules.py",
        (("AND lead_until > %s LIMIT 1", "AND lead_until < %s LIMIT 1"),),
        ("postgres",),
        "the scheduler beat checks another scheduler's lead the wrong way: a live lead is "
        "ignored (two lead) and a lapsed one blocks (after a leader dies none takes over) "
        "(fourth blind study, mutant 11)",
    ),
    Patch(
        "sqlite-renew-fence-unchecked",
        "sqlite",
        "adapters/sqlite/store.py",
        (
            (
                '"UPDATE jobs SET lease_until = ?, version = version + 1, updated_at = ? "\n'
                '                "FROM v WHERE jobs.id = v.id AND jobs.fence = v.fence AND',
                '"UPDATE jobs SET lease_until = ?, version = version + 1, updated_at = ? "\n'
                '                "FROM v WHERE jobs.id = v.id AND',
            ),
        ),
        ("sqlite",),
        "a renew checks the owner, not the fence: an older run of the same worker (the job "
        "leased again by it) renews the newer run's lease and is told it still holds the "
        "job (fourth blind study, mutant 07)",
    ),
    Patch(
        "reconcile-marks-include-rejected",
        "reconcile",
        "fsm/service/reconcile.py",
        (
            (
                'if e.event == "mark" and e.outcome == "applied" and e.attempt == job.attempt',
                'if e.event == "mark" and e.attempt == job.attempt',
            ),
        ),
        ("memory", "sqlite"),
        "a lost run's marks include the rejected ones: a zombie's late mark, refused under "
        "its older fence and audited with the job's attempt then, is given to the "
        "reconciler as the lost attempt's own (fourth blind study, mutant 18)",
    ),
    Patch(
        "payloads-float-takes-a-bool",
        "payloads",
        "fsm/payloads.py",
        (
            (
                "return isinstance(v, int | float) and not isinstance(v, bool)",
                "return isinstance(v, int | float)",
            ),
        ),
        ("memory", "sqlite", "postgres"),
        "a float field takes a bool (`False` stored as a price): caught on memory and SQLite "
        "and missed by one PostgreSQL run whose draws held no such payload, until the model "
        "checked each near miss first (fourth blind study, mutant 19)",
    ),
    Patch(
        "rescue-defers-every-lost-run",
        "recovery",
        "fsm/service/maintenance/rescue.py",
        (
            (
                'if claim is None and job.state == "running" and job.reconciler:',
                'if claim is None and job.state == "running":',
            ),
        ),
        ("memory", "sqlite", "postgres"),
        "a sweep defers every lost run as if its kind had a reconciler the sweep lacks: "
        "every crashed worker's running jobs wait a minute past their leases (caught on "
        "memory and SQLite, missed by one PostgreSQL run whose draws finished the running "
        "jobs first, until the races model checked two lapsed runs first; fourth blind "
        "study, mutant 16)",
    ),
    # --- fences of older runs (third blind study, mutants 07 and 13) -------------------
    Patch(
        "sqlite-progress-fence-unchecked",
        "sqlite",
        "adapters/sqlite/store.py",
        (
            (
                'progress_json = v.progress "\n'
                '                "FROM v WHERE jobs.id = v.id AND jobs.fence = v.fence AND',
                'progress_json = v.progress "\n                "FROM v WHERE jobs.id = v.id AND',
            ),
        ),
        ("sqlite",),
        "a progress save checks the owner, not the fence: an older run of the same worker "
        "(the job leased again by it) overwrites the current run's progress (third blind "
        "study, mutant 07)",
    ),
    Patch(
        "postgres-rejected-audit-ignores-fence",
        "postgres",
        "adapters/postgres/_sql.py",
        (
            (
                'AND x.event = e.event "\n            "AND x.fence = e.fence)) ORDER BY e.ord"',
                'AND x.event = e.event)) "\n            "ORDER BY e.ord"',
            ),
        ),
        ("postgres",),
        "a rejected report is recorded once per (job, event), not per (job, event, fence): "
        "a later run's stale report of the same event goes unaudited (third blind study, "
        "mutant 13)",
    ),
    # --- own sweeps and reconcilers (third blind study, mutants 16 and 17) -------------
    Patch(
        "rescue-own-verdict-per-owner",
        "owner",
        "fsm/service/maintenance/rescue.py",
        (
            (
                "            if owner == me:\n"
                "                verdict = identity.judge(owner, (job.id, job.fence), self.probe)\n"
                "            else:\n"
                "                if owner not in verdicts:\n"
                "                    verdicts[owner] = identity.judge(owner, (job.id, job.fence), "
                "self.probe)\n"
                "                verdict = verdicts[owner]\n",
                "            if owner not in verdicts:\n"
                "                verdicts[owner] = identity.judge(owner, (job.id, job.fence), "
                "self.probe)\n"
                "            verdict = verdicts[owner]\n",
            ),
        ),
        ("memory", "sqlite"),
        "a process's own jobs are judged once per owner, like a foreign owner's: the first "
        "own job judged decides for all, so its sweep expires a run it still holds (run "
        "twice) or leaves a run it no longer holds (third blind study, mutant 16)",
    ),
    Patch(
        "reconcile-marks-of-every-attempt",
        "reconcile",
        "fsm/service/reconcile.py",
        (
            (
                'if e.event == "mark" and e.outcome == "applied" and e.attempt == job.attempt\n',
                'if e.event == "mark" and e.outcome == "applied"\n',
            ),
        ),
        ("memory", "sqlite"),
        "a reconciler is given the marks of every attempt, not the lost one's: after an "
        "operator requeue it answers done for an attempt whose own outside call never "
        "committed, from an earlier attempt's effect (third blind study, mutant 17)",
    ),
    # --- the fifth blind study's misses ----------------------------------------------------
    Patch(
        "postgres-renew-confirm-owner-and-fence-only",
        "postgres",
        "adapters/postgres/ops.py",
        (
            (
                "            and j.fence == request.fences[j.id]\n"
                "            and j.lease_until == request.lease_until\n"
                "            and j.updated_at == request.now\n",
                "            and j.fence == request.fences[j.id]\n",
            ),
        ),
        ("postgres",),
        "a renew whose commit is unknown (the connection broke) is confirmed by owner and "
        "fence alone: a renew that never committed is answered as done, the worker trusts "
        "a lease that lapses, and another worker runs the job beside it (fifth blind "
        "study, mutant 11)",
    ),
    Patch(
        "memory-queue-limit-ignores-held-jobs",
        "limits",
        "adapters/memory_limits.py",
        (
            (
                "        for job in self._in_states(request.held_states):\n"
                '            for k in (f"kind:{job.kind}", f"queue:{job.queue}"):\n',
                "        for job in self._in_states(request.held_states):\n"
                '            for k in (f"kind:{job.kind}",):\n',
            ),
        ),
        ("memory",),
        "jobs already holding a slot are counted against their kind's limit only: a "
        "queue's concurrency limit lets a claim through as if none of its jobs ran (fifth "
        "blind study, mutant 01, caught on 3 of 4 runs before QUEUE_HELD)",
    ),
    Patch(
        "postgres-scheduler-beat-unlocked",
        "schedules",
        "adapters/postgres/schedules.py",
        (('            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", key)\n', ""),),
        ("postgres",),
        "a scheduler's beat takes no lock: two schedulers that beat at once each see no "
        "other lead and both lead (fifth blind study, mutant 12)",
    ),
    # --- erase ---------------------------------------------------------------------------
    Patch(
        "sqlite-erase-blanks-only-the-submit",
        "erase",
        "adapters/sqlite/store.py",
        (
            (
                '"SELECT seq, data_json FROM job_events WHERE job_id = ?", (decision.job.id,)',
                "\"SELECT seq, data_json FROM job_events WHERE job_id = ? AND event = 'submit'\", "
                "(decision.job.id,)",
            ),
        ),
        ("sqlite",),
        "an erase blanks the payload where it was submitted and forgets the other entries: "
        "the result a handler reported (a card number, an address) stays in the trail of "
        "a job an operator erased for a deletion request",
    ),
    Patch(
        "postgres-erase-blanks-one-entry",
        "erase",
        "adapters/postgres/ops.py",
        (
            (
                "erased = [(erased_data_json(text), job_id, seq) for seq, text in rows]",
                "erased = [(erased_data_json(text), job_id, seq) for seq, text in rows[:1]]",
            ),
        ),
        ("postgres",),
        "an erase rewrites the job's first audit entry only: every later copy of the "
        "result stays in the trail",
    ),
    Patch(
        "core-erase-keeps-progress",
        "erase",
        "fsm/lifecycle/rules.py",
        (
            (
                'ERASED = {"payload_json": "null", "result_json": None, "progress_json": None}',
                'ERASED = {"payload_json": "null", "result_json": None}',
            ),
        ),
        ("memory",),
        "an erase blanks payload and result but keeps the handler's last progress, which "
        "may quote either",
    ),
    # --- the worker's retention thread -------------------------------------------------
    Patch(
        "retainer-keeps-lease-on-drain",
        "retention",
        "fsm/worker/retainer.py",
        (("                self.service.stop()\n", "                pass\n"),),
        ("memory", "sqlite"),
        "a draining worker's retention thread ends without giving its lease up: no other "
        "worker prunes until the lease expires, a restart of every worker a lease apart "
        "prunes nothing",
    ),
    Patch(
        "retainer-first-pass-after-a-pause",
        "retention",
        "fsm/worker/retainer.py",
        (
            (
                "                pause = every * random.uniform(0.9, 1.1)\n",
                "                pause = every * random.uniform(0.9, 1.1)\n"
                "                if s.stopping.wait(pause):\n"
                "                    break\n",
            ),
        ),
        ("memory",),
        "the retention thread pauses before its first pass: a worker restarted more often "
        "than the plan's period (a deploy loop, an autoscaler) never prunes",
    ),
    # --- waiting for outcomes ------------------------------------------------------
    Patch(
        "wait-poll-pause-uncapped",
        "waits",
        "fsm/service/waiting.py",
        (("pause = min(WAIT_POLL_MAX, pause * 2)", "pause = pause * 2"),),
        ("memory", "sqlite"),
        "a polled wait's pause doubles without its cap: a wait that has waited a minute "
        "reads its job a minute apart, and returns that long after the job ended",
    ),
    Patch(
        "wait-watched-recheck-never",
        "waits",
        "fsm/service/waiting.py",
        (("yield Pause(min(left, WAIT_RECHECK))", "yield Pause(left)"),),
        ("postgres",),
        "a watched wait trusts the store's wake-up alone and never reads again until its "
        "timeout: one lost notification (a reconnect, a dropped trigger) holds it to the end",
    ),
    Patch(
        "postgres-unwatch-drops-every-watcher",
        "waits",
        "adapters/postgres/waiting.py",
        (
            (
                "                if mine is not None:\n"
                "                    mine.pop(key, None)\n"
                "                    if not mine:\n"
                "                        del self._watchers[job_id]\n",
                "                if mine is not None:\n"
                "                    del self._watchers[job_id]\n",
            ),
        ),
        ("postgres",),
        "a wait that ends forgets every wake-up of its job, not only its own: another "
        "caller still waiting on the job is woken only by its once-a-second re-read",
    ),
    Patch(
        "postgres-listener-no-wake-after-reconnect",
        "waits",
        "adapters/postgres/waiting.py",
        (
            (
                "                self._wake_all()  # anything that finished while we were away",
                "                pass  # anything that finished while we were away",
            ),
        ),
        ("postgres",),
        "the listener, back after losing its connection, does not wake its waits: a job "
        "that ended while it was away is seen only at the next re-read",
    ),
)


def apply_patch(root: Path, patch: Patch) -> None:
    """Apply `patch` to the tree at `root` (a copy: never the working tree)."""
    target = root / patch.path
    text = target.read_text()
    for old, new in patch.edits:
        found = text.count(old)
        if found != 1:
            raise ValueError(
                f"mutant {patch.name}: {patch.path} holds its text {found} times, not once "
                f"(the code moved?): {old[:80]!r}"
            )
        text = text.replace(old, new)
    target.write_text(text)
