"""The SQLite store's compare-and-set sets exactly the columns a decision changed."""

from __future__ import annotations

import attrs

from adapters.rows import JOB_COLUMNS, job_to_row
from adapters.sqlite.sql import cas_groups, cas_statement
from fsm.lifecycle.core import decide
from fsm.policies import Policy
from fsm.records import Decision

from .helpers import OWNER, job_in


def _set_columns(sql: str) -> list[str]:
    sets = sql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return [part.split(" = ", 1)[0] for part in sets.split(", ")]


def _lifecycle() -> list[Decision]:
    policy = Policy()
    job = job_in("queued")
    out = []
    for event, args in [
        ("lease", {"owner": OWNER, "lease_ttl": 30.0}),
        ("start", {}),
        ("fail", {"error": "boom"}),
        ("lease", {"owner": OWNER, "lease_ttl": 30.0}),
        ("start", {}),
        ("succeed", {"result_json": "[1, 2.5]"}),
    ]:
        fenced = args if event == "lease" else {**args, "fence": job.fence}
        d = decide(job, event, job.updated_at + 1000.0, policy, **fenced)
        out.append(d)
        job = d.job
    return out


def test_each_decision_sets_its_changed_columns_and_the_version() -> None:
    for d in _lifecycle():
        assert d.previous is not None
        sql, params = cas_statement(d)
        new, old = job_to_row(d.job), job_to_row(d.previous)
        changed = [c for c in JOB_COLUMNS[1:] if new[c] != old[c] or c == "version"]
        assert _set_columns(sql) == changed, d.entry
        assert params == [*(new[c] for c in changed), d.job.id, d.previous.version]


def test_a_decision_that_changes_nothing_else_still_sets_the_version() -> None:
    d = _lifecycle()[0]
    assert d.previous is not None
    same = attrs.evolve(d, job=attrs.evolve(d.previous, version=d.previous.version + 1))
    sql, params = cas_statement(same)
    assert _set_columns(sql) == ["version"]
    assert params == [d.previous.version + 1, d.job.id, d.previous.version]


def test_decisions_are_grouped_by_changed_columns_in_their_order() -> None:
    # given decisions changing three different column sets, two of them the same set
    lease, start, _, _, start2, succeed = _lifecycle()
    other = attrs.evolve(start2, job=attrs.evolve(start2.job, id="j2"))
    # when they are grouped for executemany
    groups = cas_groups([start, lease, other, succeed])
    # then each group is one statement with a parameter row per decision, in order
    assert [len(rows) for _, rows in groups] == [2, 1, 1]
    assert groups[0] == (cas_statement(start)[0], [cas_statement(d)[1] for d in (start, other)])
    assert groups[1] == (cas_statement(lease)[0], [cas_statement(lease)[1]])
    assert groups[2] == (cas_statement(succeed)[0], [cas_statement(succeed)[1]])
