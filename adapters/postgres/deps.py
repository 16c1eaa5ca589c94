"""Dependencies on PostgreSQL (`fsm.ports.TracksDependencies`, docs/dependencies.md):
the `job_deps` table of migration 4, written by insert and read by the releaser."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any

from fsm.errors import UnknownPrerequisite
from fsm.records import Decision, Job

from .._rows import JOB_COLUMNS, job_from_values
from . import migrations
from ._sql import state_list


def lock_prerequisites(jobs: str) -> str:
    """In insert's transaction, before the new rows: the named prerequisites that are
    stored, each locked FOR KEY SHARE so a concurrent prune (FOR UPDATE SKIP LOCKED)
    passes it by until the insert commits."""
    return f"SELECT id FROM {jobs} WHERE id = ANY(%s::text[]) FOR KEY SHARE"


def check_prerequisites(decisions: Sequence[Decision], stored: Sequence[Sequence[Any]]) -> None:
    """Refuse prerequisites that are not stored (`stored`: the rows of
    `lock_prerequisites`); the caller rolls the transaction back."""
    found = {r[0] for r in stored}
    for d in decisions:
        missing = [a for a in d.prerequisites if a not in found]
        if missing:
            raise UnknownPrerequisite(d.job.id, missing)


def prerequisite_rows(
    schema: str, decisions: Sequence[Decision], inserted: Collection[str]
) -> tuple[str, list[Any]] | None:
    """The statement that records the prerequisites of the jobs this insert wrote (a
    duplicate key's are the first's), or None when there are none."""
    pairs = [(d.job.id, a) for d in decisions if d.job.id in inserted for a in d.prerequisites]
    if not pairs:
        return None
    return (
        f"INSERT INTO {migrations.quote(schema)}.job_deps (job_id, after_id) "
        "SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING",
        [[p[0] for p in pairs], [p[1] for p in pairs]],
    )


class PostgresDependencies:
    """Mixed into PostgresStore (it reads through the store's pooled connections)."""

    schema: str

    def connection(self, what: str) -> AbstractContextManager[Any]:
        raise NotImplementedError  # provided by PostgresStore

    def _tables(self) -> tuple[str, str]:
        s = migrations.quote(self.schema)
        return f"{s}.jobs", f"{s}.job_deps"

    def prerequisites(self, job_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        jobs, deps = self._tables()
        sql = (
            f"SELECT d.job_id, d.after_id, j.state FROM {deps} d "
            f"LEFT JOIN {jobs} j ON j.id = d.after_id WHERE d.job_id = ANY(%s::text[])"
        )
        with self.connection("prerequisites") as conn:
            rows = conn.execute(sql, (list(dict.fromkeys(job_ids)),)).fetchall()
        out: dict[str, dict[str, str | None]] = {}
        for job_id, after_id, state in rows:
            out.setdefault(job_id, {})[after_id] = state
        return out

    def dependents(self, job_ids: Sequence[str], states: tuple[str, ...], limit: int) -> list[Job]:
        if not job_ids or not states or limit < 1:
            return []
        jobs, deps = self._tables()
        sql = (
            f"SELECT {', '.join(JOB_COLUMNS)} FROM {jobs} WHERE id IN (SELECT job_id FROM "
            f"{deps} WHERE after_id = ANY(%s::text[])) AND state IN ({state_list(states)}) "
            "LIMIT %s"
        )
        with self.connection("dependents") as conn:
            rows = conn.execute(sql, (list(dict.fromkeys(job_ids)), limit)).fetchall()
        return [job_from_values(r) for r in rows]

    def in_states_after(self, states: tuple[str, ...], after: str, limit: int) -> list[Job]:
        if not states or limit < 1:
            return []
        jobs, _ = self._tables()
        sql = (
            f"SELECT {', '.join(JOB_COLUMNS)} FROM {jobs} "
            f"WHERE state IN ({state_list(states)}) AND id > %s ORDER BY id LIMIT %s"
        )
        with self.connection("jobs in states after an id") as conn:
            rows = conn.execute(sql, (after, limit)).fetchall()
        return [job_from_values(r) for r in rows]
