"""PostgreSQL prune at size: one `Engine.prune` goes on after each batch instead of
walking every job deleted before it (a delete leaves its index entry until VACUUM)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from adapters.postgres import open_store
from benchmarks.fill import finished_postgres
from fsm.ports import PruneRequest
from fsm.service.engine import Engine

pytestmark = pytest.mark.postgres

JOBS = 20_000
BATCH = 100


def _index_blocks(url: str, deleted: int) -> int:
    """Buffer reads of the prune index once the pruning backends' counters have landed
    (a backend reports them when its connection closes)."""
    until = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row: Any = conn.execute(
                "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'jobs'"
            ).fetchone()
            if row[0] >= deleted or time.monotonic() > until:
                break
            time.sleep(0.1)
        blocks: Any = conn.execute(
            "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes "
            "WHERE indexrelname = 'jobs_finished'"
        ).fetchone()
    return int(blocks[0])


def _reset_stats(url: str, inserted: int) -> None:
    """Wait for the fill's counters, then zero every counter of the database."""
    until = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < until:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row: Any = conn.execute(
                "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'jobs'"
            ).fetchone()
            if row[0] >= inserted:
                break
            time.sleep(0.1)
        conn.execute("SELECT pg_stat_reset()")


def test_a_prune_in_batches_reads_the_prune_index_once_not_once_per_batch(pg_url: str) -> None:
    open_store(pg_url).close()  # migrate
    finished_postgres(pg_url, "public", JOBS, days=70.0)
    _reset_stats(pg_url, JOBS)
    engine = Engine(open_store(pg_url))
    try:
        removed = engine.prune(limit=BATCH, max_batches=JOBS)
    finally:
        engine.store.close()
    assert removed == JOBS * 9 // 10  # 70 days spread, succeeded kept 7 days
    blocks = _index_blocks(pg_url, removed)
    # Going on after the last job deleted, each of the 180 batches reads a few pages
    # (root, a leaf, the next leaf); walking from the start again, batch k reads the
    # k * 100 entries deleted before it too: over 5,000 pages in all at this size.
    batches = removed // BATCH + 1
    assert blocks <= 6 * batches, f"{blocks} index pages read by {batches} batches"


def test_the_same_request_goes_on_after_its_last_deleted_job(pg_url: str) -> None:
    """What a batch passed over (here: locked by another transaction) waits for the
    next request, not for the next batch of the same one."""
    open_store(pg_url).close()
    finished_postgres(pg_url, "public", 4, days=70.0)  # 52, 35, 17 days old, and just now
    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url) as holder:
            [(first,)] = holder.execute(
                "SELECT id FROM jobs ORDER BY seq LIMIT 1 FOR UPDATE"
            ).fetchall()
            request = PruneRequest(cutoffs={"succeeded": time.time() - 86400.0}, limit=2)
            assert store.prune(request) == 2  # the first job is locked: the 2nd and 3rd
            holder.rollback()  # the lock is gone
        assert store.prune(request) == 0  # the 4th finished within a day; the 1st is behind
        assert store.get(first) is not None
        again = PruneRequest(cutoffs=dict(request.cutoffs), limit=2)
        assert store.prune(again) == 1  # a new request starts from the beginning
        assert store.get(first) is None
    finally:
        store.close()
