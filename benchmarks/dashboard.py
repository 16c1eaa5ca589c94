"""Dashboard latency with a million finished jobs on PostgreSQL.

    python benchmarks/dashboard.py [--finished 1000000] [--samples 20]

On a fresh database: `--finished` succeeded jobs (4 audit entries each, written
straight into the tables by `benchmarks/fill.py`, stamped a day ago), then
a live hour written through the Engine (2,000 jobs finished, some failed, 200
queued in three queues, 20 parked in investigate, 40 leased by 4 owners). Then each
page of the dashboard is requested `--samples` times through the ASGI app
in-process (query, template, no network) and p50/p95/max are printed, next to the
JobBrowser query alone. Target: every page under 200 ms.
The machine has 2 cores shared with other work: figures move between runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fill import finished_postgres  # noqa: E402
from benchmarks.services import create_database, drop_database  # noqa: E402
from fsm import Engine, Owner, open_store  # noqa: E402
from fsm.dashboard import views  # noqa: E402
from fsm.ports import JobBrowser, ListRequest  # noqa: E402

TARGET_MS = 200.0


def live_hour(engine: Engine) -> dict[str, str]:
    """Recent work through the Engine; returns a few ids and keys to search for."""
    owners = [Owner(f"bench-{i}", 1000 + i, f"inc{i:013d}") for i in range(4)]
    queues = ["default", "mail", "reports"]
    jobs = engine.submit_many(
        [("bench.live", {"i": i}, {"queue": queues[i % 3], "idempotency_key": f"live-{i}",
                                    "correlation_id": f"req-{i // 10}"}) for i in range(2000)]
    )  # fmt: skip
    for q in queues:
        while leased := engine.claim(owners[0], [q], limit=200):
            for job in leased:
                engine.start(job.id, job.fence)
                if int(job.payload.get("i", 1)) % 25 == 0:
                    engine.fail(job.id, job.fence, "boom", permanent=True)
                else:
                    engine.succeed(job.id, job.fence, {"ok": True})
    engine.submit_many([("bench.wait", {}, {"queue": queues[i % 3]}) for i in range(200)])
    for i in range(20):
        job = engine.submit("bench.charge", {"i": i}, queue="payments")
        (leased,) = engine.claim(owners[1], ["payments"], ids=[job.id])
        engine.start(job.id, leased.fence)
        engine.ambiguous(job.id, leased.fence, "gateway timeout")
    held = engine.submit_many([("bench.hold", {}, {"queue": "held"}) for _ in range(40)])
    for i, job in enumerate(held):
        engine.claim(owners[i % 4], ["held"], ids=[job.id])
    return {"id": jobs[1234].id, "key": "live-777", "corr": "req-42"}


def timed(fn: Callable[[], Any], samples: int) -> tuple[float, float, float]:
    fn()  # warm: connections, plans, template compilation
    ms = []
    for _ in range(samples):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return statistics.median(ms), p95, ms[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="Keep the database; print its URL.")
    parser.add_argument("--db", default=None, help="Reuse a database a --keep run left.")
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from fsm.dashboard import create_app

    name, db = create_database() if args.db is None else (args.db.rsplit("/", 1)[1], args.db)
    try:
        url = f"{db}?pool_max=4"
        store = open_store(url)
        engine = Engine(store)
        t0 = time.perf_counter()
        if args.db is None:
            finished_postgres(db, "public", args.finished)
        fill = time.perf_counter() - t0
        keys = live_hour(engine)
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE jobs")
            conn.execute("VACUUM ANALYZE job_events")
            total = conn.execute("SELECT count(*) FROM jobs").fetchone()
        print(f"# {total[0] if total else '?'} jobs ({args.finished} finished filled in "
              f"{fill:.0f}s), PostgreSQL, {args.samples} samples each")  # fmt: skip
        browser = engine.store
        assert isinstance(browser, JobBrowser)
        middle = "0" + str(args.finished // 2).rjust(25, "0")
        token = "bench-operator-token-0123456789abcdef"
        client = TestClient(
            create_app(engine, token=token),
            base_url="http://127.0.0.1",
            headers={"Authorization": f"Bearer {token}"},
        )

        def page(path: str, **params: str) -> Callable[[], Any]:
            def get() -> None:
                r = client.get(path, params=params)
                assert r.status_code == 200, r.text[:300]

            return get

        def recent() -> Any:
            return browser.recent_transitions(time.time() - 3600)

        def query(**kw: Any) -> Callable[[], Any]:
            return lambda: browser.list_jobs(ListRequest(**kw))

        cases: list[tuple[str, Callable[[], Any]]] = [
            ("page  overview /", page("/")),
            ("page  jobs, first page", page("/jobs")),
            ("page  jobs, state=succeeded", page("/jobs", state="succeeded")),
            ("page  jobs, state=failed", page("/jobs", state="failed")),
            ("page  jobs, state=investigate", page("/jobs", state="investigate")),
            ("page  jobs, page at 500k (cursor)", page("/jobs", after=middle)),
            ("page  jobs, queue=mail", page("/jobs", queue="mail")),
            ("page  jobs, kind=bench.charge", page("/jobs", kind="bench.charge")),
            ("page  jobs, search id prefix", page("/jobs", q=keys["id"][:12])),
            ("page  jobs, search idempotency key", page("/jobs", q=keys["key"])),
            ("page  jobs, search correlation id", page("/jobs", q=keys["corr"])),
            ("page  investigate inbox", page("/investigate")),
            ("page  lifecycle diagram (Graphviz)", page("/diagram")),
            ("query list_jobs, first page", query()),
            ("query list_jobs, state=failed", query(states=("failed",))),
            ("query recent_transitions(1 h)", recent),
            ("query Store.counts()", engine.counts),
            ("query live workers (leases)", lambda: views.workers(engine)),
            ("query overview reads, counts uncached", lambda: views.overview(engine)),
        ]  # fmt: skip
        print(f"{'what':<40} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  target")
        worst = 0.0
        for what, fn in cases:
            p50, p95, top = timed(fn, args.samples)
            if what.startswith("page"):
                worst = max(worst, p95)
            print(f"{what:<40} {p50:>8.1f} {p95:>8.1f} {top:>8.1f}  < {TARGET_MS:.0f}")
        print(f"# worst page p95: {worst:.1f} ms ({'met' if worst < TARGET_MS else 'MISSED'})")
        client.close()
        store.close()
    finally:
        if args.keep:
            print(f"# kept {db}")
        else:
            drop_database(name)


if __name__ == "__main__":
    main()
