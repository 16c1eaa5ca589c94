"""The PostgreSQL store written once, driven twice: every operation of the asyncio twin
(`AsyncPostgresStore`) runs the same plan as the blocking store (`PostgresStore`). Here
each operation is driven both ways against the real server, one schema per driver,
and the two must agree: the same answers, the same errors, the same rows stored —
also when the connection breaks before or after the commit (the fault proxy)."""

from __future__ import annotations

import ast
import asyncio
import io
import tokenize
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest

from adapters.postgres import open_store
from adapters.postgres.aio import AsyncPostgresStore
from adapters.postgres.store import COPY_MIN, PostgresStore
from fsm.errors import JobFSMError, LeaseLost
from fsm.lifecycle.core import decide
from fsm.policies import Policy
from fsm.ports import AsyncStore, Capacity, ScanRequest
from fsm.records import AuditEntry, Decision, Job, Owner, new_id

pytestmark = pytest.mark.postgres

SYNC, ASYNC = "driven_sync", "driven_async"
NOW = 1_700_000_000.0
POLICY = Policy()
OWNER = Owner("host-a", 1, "inc-a")
WAITING = ("queued", "retry_wait")  # the sources of `lease`: what a capacity counts
#: the twin's operations besides open/aclose: AsyncStore's, and JoinsTransactions'
OPERATIONS = {"insert", "insert_in", "get", "apply", "erase", "record", "scan", "history"}
OPERATIONS |= {"counts"}


def _with(url: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def submit(queue: str = "default", **fields: Any) -> Decision:
    return decide(
        None, "submit", NOW, POLICY, id=new_id(NOW), kind="k", payload_json="{}", queue=queue,
        **fields,
    )  # fmt: skip


def then(job: Job, event: str, **args: Any) -> Decision:
    return decide(job, event, NOW, POLICY, **args)


def normal(value: Any) -> Any:
    """An answer, comparable across the two schemas (errors by type and text)."""
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, Raised):
        return ("raised", normal(value.error))
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value).replace(ASYNC, SYNC))
    return value


class Pair:
    """A blocking store on schema SYNC, and on schema ASYNC the asyncio twin of another
    store, on one event loop. `both` calls one operation on each and checks they agree."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.blocking: PostgresStore = open_store(_with(url, schema=SYNC))
        self.base: PostgresStore = open_store(_with(url, schema=ASYNC))
        self.loop = asyncio.Runner()
        self.twin = self.base.async_store()
        self.loop.run(self.twin.open())
        self.called: set[str] = set()

    def both(self, op: str, *args: Any) -> Any:
        """The answer of `op(*args)` on both stores, which must agree (or raise: both)."""
        self.called.add(op)
        sync = outcome(lambda: getattr(self.blocking, op)(*args))
        twin = outcome(lambda: self.loop.run(getattr(self.twin, op)(*args)))
        assert normal(twin) == normal(sync), op
        if isinstance(sync, Raised):
            raise sync.error
        return sync

    def joined(
        self,
        decisions: Sequence[Decision],
        *,
        commit: bool,
        autocommit: bool = False,
        before: Callable[[], object] = lambda: None,
    ) -> Any:
        """`insert_in` on a caller's connection of each kind (blocking, asyncio), in the
        caller's transaction, then its COMMIT or ROLLBACK; both must agree. `before`
        runs before each."""
        self.called.add("insert_in")

        def blocking() -> list[Job]:
            with psycopg.connect(self.url, autocommit=autocommit) as conn:
                out = self.blocking.insert_in(conn, decisions)
                conn.commit() if commit else conn.rollback()
                return out

        async def twin() -> list[Job]:
            async with await psycopg.AsyncConnection.connect(
                self.url, autocommit=autocommit
            ) as conn:
                out = await self.twin.insert_in(conn, decisions)
                await (conn.commit() if commit else conn.rollback())
                return out

        before()
        sync = outcome(blocking)
        before()
        other = outcome(lambda: self.loop.run(twin()))
        assert normal(other) == normal(sync)
        if isinstance(sync, Raised):
            raise sync.error
        return sync

    def stored(self) -> tuple[Any, Any]:
        """Every row each schema holds (jobs, audit trail, prerequisites)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            return tuple(  # type: ignore[return-value]
                [
                    conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY 1, 2").fetchall()
                    for table in ("jobs", "job_events", "job_deps")
                ]
                for schema in (SYNC, ASYNC)
            )

    def close(self) -> None:
        self.loop.run(self.twin.aclose())
        self.loop.close()
        self.blocking.close()
        self.base.close()


@attrs.frozen
class Raised:
    """A call's error (apart from an error it returns: apply's VersionConflict)."""

    error: JobFSMError


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except JobFSMError as err:
        return Raised(err)


@pytest.fixture
def pair(pg_url: str) -> Iterator[Pair]:
    p = Pair(pg_url)
    try:
        yield p
    finally:
        p.close()


def test_every_operation_of_the_asyncio_twin_agrees_with_the_blocking_store(pair: Pair) -> None:
    # --- insert: new jobs, a key's stored twin, capacity, prerequisites, COPY, bad input
    a, b, c = submit(idempotency_key="key-1"), submit(), submit(queue="other")
    job_a, job_b, job_c = pair.both("insert", [a, b, c])
    [again, fresh] = pair.both("insert", [submit(idempotency_key="key-1"), submit()])
    assert again == job_a
    assert fresh.state == "queued"
    capped = Capacity({"capped": 1}, WAITING)
    pair.both("insert", [submit(queue="capped")], capped)
    with pytest.raises(JobFSMError, match="capped"):
        pair.both("insert", [submit(queue="capped")], capped)  # QueueFull
    [waiting] = pair.both("insert", [submit(after=(job_a.id,), on_failed_dependency="cancel")])
    assert waiting.state == "waiting"
    with pytest.raises(JobFSMError, match="01NOSUCHJOB"):
        pair.both(
            "insert",
            [submit(after=("01NOSUCHJOB0000000000000000",), on_failed_dependency="cancel")],
        )
    many = [submit() for _ in range(COPY_MIN)]
    assert pair.both("insert", many) == [d.job for d in many]  # COPY
    assert pair.both("insert", many) == [d.job for d in many]  # the ids again: ON CONFLICT
    assert pair.both("insert", []) == []
    huge = submit()
    with pytest.raises(JobFSMError, match="64-bit"):
        pair.both("insert", [attrs.evolve(huge, job=attrs.evolve(huge.job, priority=2**70))])
    with pytest.raises(JobFSMError, match="NUL"):  # psycopg's DataError, translated
        pair.both("insert", [attrs.evolve(huge, job=attrs.evolve(huge.job, kind="k\x00"))])

    # --- insert in a caller's transaction: committed, a key's twin, rolled back, refused
    [joined] = pair.joined([submit(idempotency_key="key-j")], commit=True)
    assert pair.joined([submit(idempotency_key="key-j")], commit=True) == [joined]
    [gone] = pair.joined([submit()], commit=False)
    assert pair.both("get", gone.id) is None
    with pytest.raises(JobFSMError, match="autocommit"):
        pair.joined([submit()], commit=True, autocommit=True)

    # --- reads
    assert pair.both("get", job_a.id) == job_a
    assert pair.both("get", "no-such-job") is None
    assert [e.event for e in pair.both("history", job_a.id)] == ["submit"]
    assert pair.both("history", "no-such-job") == []
    assert pair.both("scan", ScanRequest(states=("waiting",))) == [waiting]
    assert len(pair.both("scan", ScanRequest(states=("queued",), queues=("other",), limit=5))) == 1
    assert pair.both("scan", ScanRequest(states=())) == []

    # --- apply: one, a lost compare-and-set, a batch, one job twice, refused
    cancel_b = then(job_b, "cancel", actor="op", reason="r")
    [cancelled_b] = pair.both("apply", [cancel_b])
    [conflict] = pair.both("apply", [cancel_b])
    assert isinstance(conflict, Exception)
    assert "version" in str(conflict).lower()
    lease_c = then(job_c, "lease", owner=OWNER, lease_until=NOW + 30)
    cancel_fresh = then(fresh, "cancel", actor="op", reason="r")
    [leased_c, _] = pair.both("apply", [lease_c, cancel_fresh])
    requeue_b = then(cancelled_b, "requeue", actor="op", reason="r", attempts=2)
    cancel_again = then(requeue_b.job, "cancel", actor="op", reason="again")
    assert pair.both("apply", [requeue_b, cancel_again]) == [requeue_b.job, cancel_again.job]
    with pytest.raises(JobFSMError, match="existing job"):
        pair.both("apply", [submit()])
    assert pair.both("apply", []) == []

    # --- erase: a finished job's payload, from its record and its trail; stale; refused
    erase_b = then(cancel_again.job, "erase", actor="op", reason="gdpr")
    assert pair.both("erase", erase_b) == erase_b.job
    assert isinstance(pair.both("erase", erase_b), Exception)  # a lost compare-and-set
    with pytest.raises(JobFSMError, match="existing job"):
        pair.both("erase", submit())

    # --- record: a stale report's rejected entry, recorded once however often
    with pytest.raises(LeaseLost) as stale:
        then(leased_c, "start", fence=leased_c.fence + 7)
    rejected: AuditEntry = stale.value.entry  # type: ignore[attr-defined]
    pair.both("record", [rejected])
    pair.both("record", [rejected, rejected])
    pair.both("record", [])
    assert [e.outcome for e in pair.both("history", job_c.id)][-1] == "rejected"

    # then: the same counts and, row for row, the same tables; every operation was driven
    assert pair.both("counts")[("default", "cancelled")] == 2
    sync_rows, async_rows = pair.stored()
    assert sync_rows == async_rows
    assert pair.called == OPERATIONS
    twins = {
        name
        for name in vars(AsyncPostgresStore)
        if asyncio.iscoroutinefunction(getattr(AsyncPostgresStore, name))
    }
    assert twins - {"open", "aclose", "run", "purge"} == OPERATIONS
    assert {name for name in dir(AsyncStore) if not name.startswith("_")} <= OPERATIONS | {
        "open",
        "aclose",
    }


# --- faults: the connection breaks before the server hears the write, or after it committed

APPLY, INSERT, COMMIT = b"upd AS (UPDATE", b"ins AS (INSERT", b"COMMIT"
RECORD = b"e.outcome <> 'rejected'"


def _insert_one(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    return "insert", ([submit()],)


def _insert_capped(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    return "insert", ([submit(queue="capped")], Capacity({"capped": 5}, WAITING))


def _insert_copied(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    return "insert", ([submit() for _ in range(COPY_MIN)],)


def _apply_one(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    [job] = pair.both("insert", [submit()])
    return "apply", ([then(job, "cancel", actor="op", reason="r")],)


def _apply_in_order(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    [job] = pair.both("insert", [submit()])
    cancel = then(job, "cancel", actor="op", reason="r")
    return "apply", ([cancel, then(cancel.job, "requeue", actor="op", reason="r", attempts=1)],)


def _erase(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    [job] = pair.both("insert", [submit()])
    [cancelled] = pair.both("apply", [then(job, "cancel", actor="op", reason="r")])
    return "erase", (then(cancelled, "erase", actor="op", reason="gdpr"),)


def _record(pair: Pair) -> tuple[str, tuple[Any, ...]]:
    [job] = pair.both("insert", [submit()])
    [leased] = pair.both("apply", [then(job, "lease", owner=OWNER, lease_until=NOW + 30)])
    try:
        then(leased, "start", fence=leased.fence + 1)
    except LeaseLost as err:
        return "record", ([err.entry],)  # type: ignore[attr-defined]
    raise AssertionError("a stale start was not refused")


FAULTS = [
    ("insert", _insert_one, INSERT),
    ("insert with capacity", _insert_capped, COMMIT),
    ("insert by COPY", _insert_copied, COMMIT),
    ("apply", _apply_one, APPLY),
    ("apply of one job twice", _apply_in_order, COMMIT),
    ("erase", _erase, COMMIT),
    ("record", _record, RECORD),
]


@pytest.mark.parametrize("mode", ["drop", "deliver_then_drop"])
@pytest.mark.parametrize(("name", "prepare", "pattern"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_connection_broken_around_the_commit_ends_the_same_way_on_both_paths(
    pg_proxy: tuple[Any, str],
    name: str,
    prepare: Callable[[Pair], tuple[str, tuple[Any, ...]]],
    pattern: bytes,
    mode: str,
) -> None:
    proxy, url = pg_proxy
    pair = Pair(url)
    try:
        # given: a write, and its connection armed to break before the server hears it
        # ("drop") or after the server committed it, its answer lost ("deliver_then_drop")
        op, args = prepare(pair)
        outcomes = []
        for call in (
            lambda: getattr(pair.blocking, op)(*args),
            lambda: pair.loop.run(getattr(pair.twin, op)(*args)),
        ):
            proxy.arm(pattern, mode)
            # when: the write runs, on one path and then the other
            outcomes.append(outcome(call))
            assert proxy.fired.wait(10), name
        sync, twin = outcomes
        # then: both re-read on a fresh connection and tell the same: applied after a
        # commit, "not applied" (nothing changed, safe to retry) before one
        assert normal(twin) == normal(sync)
        if mode == "drop":
            assert isinstance(sync, Raised)
            assert "not applied" in str(sync.error)
        else:
            assert not isinstance(sync, Raised), sync
        # and: they left the same rows
        sync_rows, async_rows = pair.stored()
        assert sync_rows == async_rows
    finally:
        pair.close()


def test_a_callers_connection_broken_during_a_joined_insert_fails_alike_on_both_paths(
    pg_proxy: tuple[Any, str],
) -> None:
    proxy, url = pg_proxy
    pair = Pair(url)
    try:
        for mode in ("drop", "deliver_then_drop"):
            # when: the caller's own connection breaks under the insert in its transaction
            with pytest.raises(JobFSMError, match="caller's transaction"):
                pair.joined([submit()], commit=True, before=lambda m=mode: proxy.arm(INSERT, m))
            # then: both fail alike (nothing to reconcile: the caller's transaction is gone)
        assert pair.stored() == ([[], [], []], [[], [], []])
    finally:
        pair.close()


# --- the twin stays a driver --------------------------------------------------------------


def own_lines(path: Path) -> int:
    """Code lines of a module's functions and classes: no docstring, comment or blank."""
    text = path.read_text()
    tree = ast.parse(text)
    docs: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in skip | {tokenize.ENDMARKER}:
            code.update(range(tok.start[0], tok.end[0] + 1))
    spans: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.update(range(start, (node.end_lineno or start) + 1))
    return len((spans & code) - docs)


def test_the_asyncio_twin_adds_at_most_120_lines_of_its_own() -> None:
    # the twin drives the blocking store's plans; store logic added there is a second copy
    from adapters.postgres import aio

    assert own_lines(Path(aio.__file__)) <= 120
