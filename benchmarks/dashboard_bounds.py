"""The dashboard's two worst pages: a job with 100,000 audit entries, and the overview of
10,000 queues (issue 32 item 4).

    python benchmarks/dashboard_bounds.py [--entries 100000] [--queues 10000] [--postgres]

On a fresh store (a SQLite file, or a fresh PostgreSQL database with --postgres): one
job whose trail is `--entries` long (cancelled and requeued by operators, written
straight into the audit table), and one queued job in each of `--queues` queues.
Each page is then requested through the ASGI app in-process with an operator's bearer
token (query, template, no network): the first request (counts and diagrams not yet
cached) and the median of `--samples` more, with the bytes sent. Target: each page
under 1 s and 1 MB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.rows import audit_values, inserts  # noqa: E402
from benchmarks.services import create_database, drop_database  # noqa: E402
from fsm import Engine, open_store  # noqa: E402
from fsm.records import AuditEntry  # noqa: E402

TOKEN = "bench-operator-token-0123456789abcdef"
TARGET_S = 1.0
TARGET_BYTES = 1_000_000


def trail(job_id: str, n: int, t0: float) -> list[list[object]]:
    """`n - 1` audit rows after the submit: operator cancels and requeues, alternately."""
    rows = []
    for v in range(2, n + 1):
        cancel = v % 2 == 0
        entry = AuditEntry(
            job_id, v, t0 + v * 1e-3,
            "cancel" if cancel else "requeue",
            "queued" if cancel else "cancelled",
            "cancelled" if cancel else "queued",
            0, 0, actor="ops-bot", reason=f"bulk clean-up round {v // 2}",
        )  # fmt: skip
        rows.append(audit_values(entry))
    return rows


def fill(url: str, entries: int, queues: int) -> str:
    """The long-trailed job and the many queues; returns the job's id."""
    store = open_store(url)
    try:
        engine = Engine(store)
        job = engine.submit("bench.long", {"note": "a long trail"})
        engine.submit_many([("bench.q", {}, {"queue": f"q{i:05d}"}) for i in range(queues)])
    finally:
        store.close()
    rows = trail(job.id, entries, time.time() - 3600)
    if url.startswith("sqlite"):
        import sqlite3

        from adapters.sqlite import parse_url

        _jobs, add_audit = inserts("?")
        conn = sqlite3.connect(parse_url(url).path, isolation_level=None, timeout=60)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(add_audit, rows)
        conn.execute("COMMIT")
        conn.close()
    else:
        import psycopg

        _jobs, add_audit = inserts("%s")
        with psycopg.connect(url, autocommit=True) as conn:
            with conn.cursor() as cur:
                cur.executemany(add_audit, rows)
            conn.execute("VACUUM ANALYZE job_events")
    return job.id


def measure(get: Callable[[], bytes], samples: int) -> tuple[float, float, int]:
    """(first request s, median of the next `samples` s, bytes)."""
    t = time.perf_counter()
    body = get()
    first = time.perf_counter() - t
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        get()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times), len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument(
        "--entries",
        type=int,
        default=100_000,
        help="audit entries of the one long job (default: %(default)s)",
    )
    parser.add_argument(
        "--queues",
        type=int,
        default=10_000,
        help="queues, one queued job each (default: %(default)s)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=10,
        help="timed requests after the first; the median is shown (default: %(default)s)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="a fresh PostgreSQL database instead of a SQLite file",
    )
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from fsm.dashboard import create_app

    folder = tempfile.TemporaryDirectory(prefix="jobfsm-dash-bounds-")
    name = None
    if args.postgres:
        name, url = create_database()
    else:
        url = f"sqlite:///{folder.name}/jobs.db"
    try:
        t = time.perf_counter()
        job_id = fill(url, args.entries, args.queues)
        print(f"# {args.entries} audit entries on one job, {args.queues} queues, "
              f"{url.split(':', 1)[0]}, filled in {time.perf_counter() - t:.1f}s")  # fmt: skip
        store = open_store(url)
        engine = Engine(store)
        client = TestClient(create_app(engine, token=TOKEN), base_url="http://127.0.0.1")
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def page(path: str) -> Callable[[], bytes]:
            def get() -> bytes:
                r = client.get(path, headers=headers)
                assert r.status_code == 200, r.text[:300]
                return r.content

            return get

        print(f"{'page':<34} {'first s':>8} {'p50 s':>8} {'bytes':>10}  target")
        worst = 0.0
        biggest = 0
        for what, path in (
            (f"job page, {args.entries} entries", f"/jobs/{job_id}"),
            (f"overview, {args.queues} queues", "/"),
            ("investigate inbox", "/investigate"),
        ):
            first, p50, size = measure(page(path), args.samples)
            worst, biggest = max(worst, first, p50), max(biggest, size)
            print(f"{what:<34} {first:>8.3f} {p50:>8.3f} {size:>10,}  < {TARGET_S:.0f} s, 1 MB")
        met = worst < TARGET_S and biggest < TARGET_BYTES
        print(f"# slowest {worst:.3f} s, largest {biggest:,} bytes: {'met' if met else 'MISSED'}")
        client.close()
        store.close()
    finally:
        if name is not None:
            drop_database(name)
        folder.cleanup()


if __name__ == "__main__":
    main()
