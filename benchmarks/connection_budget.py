"""PostgreSQL connections per process shape, counted, and what a small pool costs a burst.

    python -m benchmarks.connection_budget                      # every shape, default URL
    python -m benchmarks.connection_budget --url-options pool_max=10
    python -m benchmarks.connection_budget --burst 2000 --pool-max 2,10

Shapes (`--shapes`): `async` (AsyncEngine.open, 20 rounds of 50 submits at once),
`async-wait` (the same, then a `wait`), `sync` (Engine over open_store, 1,000
submits from 32 threads), `worker-poll` and `worker-amqp` (`jobfsm worker
--concurrency 16`, polling or RabbitMQ at `--amqp`, draining 2,000 jobs submitted
from this process). Each runs as a child process with an `application_name` of
its own on a fresh database; this process counts that name's rows in
`pg_stat_activity` every 20 ms and prints the count once the shape has opened
(before any job) and the largest count seen while it works.

`--burst N`: N `AsyncEngine.submit` calls at once (`asyncio.gather`), twice per
`pool_max` value, in this process; prints submits per second of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .services import create_database, drop_database

SHAPES = ("async", "async-wait", "sync", "worker-poll", "worker-amqp")
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
#: the longest a shape may take (seconds)
SHAPE_TIMEOUT = 120.0

HANDLERS = """
import time


def work(ctx, payload):
    time.sleep(0.005)


handlers = {"t.work": work}
"""

_ASYNC = """
import asyncio
from fsm import AsyncEngine
from fsm.errors import WaitTimeout

async def main():
    engine = await AsyncEngine.open(URL)
    print("opened", flush=True)
    await asyncio.sleep(1.0)
    for _ in range(20):
        jobs = await asyncio.gather(*(engine.submit("t.work", {"i": i}) for i in range(50)))
    if WAIT:
        try:
            await engine.wait(jobs[0].id, timeout=1.0)
        except WaitTimeout:
            pass
    await asyncio.sleep(0.5)
    await engine.aclose()

asyncio.run(main())
"""

_SYNC = """
import time
from concurrent.futures import ThreadPoolExecutor
from fsm import Engine, open_store

engine = Engine(open_store(URL))
print("opened", flush=True)
time.sleep(1.0)
with ThreadPoolExecutor(32) as pool:
    list(pool.map(lambda i: engine.submit("t.work", {"i": i}), range(1000)))
time.sleep(0.5)
engine.store.close()
"""


def _count(admin: Any, db: str, app: str) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
        (db, app),
    ).fetchone()
    return int(row[0])


def _peak(admin: Any, db: str, app: str, proc: subprocess.Popen[Any], seconds: float) -> int:
    peak = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        peak = max(peak, _count(admin, db, app))
        time.sleep(0.02)
    return peak


def _child(admin: Any, db: str, url: str, app: str, shape: str) -> tuple[int, int]:
    body = _SYNC if shape == "sync" else _ASYNC
    code = f"URL = {url!r}\nWAIT = {shape == 'async-wait'}\n" + textwrap.dedent(body)
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "opened", f"{shape} did not open"
            time.sleep(0.5)
            opened = _count(admin, db, app)
            peak = max(opened, _peak(admin, db, app, proc, SHAPE_TIMEOUT))
            proc.wait(SHAPE_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
    return opened, peak


def _worker(
    admin: Any, db: str, url: str, app: str, shape: str, *, base: str, amqp: str, work: str
) -> tuple[int, int]:
    from fsm import Engine, open_store

    ready = os.path.join(work, f"{app}.ready")
    command = [sys.executable, "-m", "fsm.cli", "worker", "--app", "budget_handlers"]
    command += ["--store", url, "--concurrency", "16", "--log-level", "warning"]
    command += ["--ready-file", ready]
    if shape == "worker-amqp":
        command += ["--delivery", amqp]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([work, *sys.path])}
    proc = subprocess.Popen(command, cwd=work, env=env)
    try:
        deadline = time.monotonic() + SHAPE_TIMEOUT
        while not os.path.exists(ready):
            assert proc.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.05)
        time.sleep(1.5)
        opened = _count(admin, db, app)
        with open_store(base) as store, ThreadPoolExecutor(1) as pool:
            engine = Engine(store)
            batches = [[("t.work", {"i": i}, {}) for i in range(100)]] * 20
            submitted = pool.submit(lambda: [engine.submit_many(b) for b in batches])
            peak = max(opened, _peak(admin, db, app, proc, 8.0))
            submitted.result()
        proc.send_signal(signal.SIGTERM)
        proc.wait(SHAPE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return opened, peak


def count_shapes(
    shapes: Sequence[str], options: str = "", amqp: str = DEFAULT_AMQP
) -> dict[str, tuple[int, int]]:
    """{shape: (connections once opened, most connections while working)}."""
    import psycopg

    from fsm import open_store

    db, base = create_database()
    work = tempfile.mkdtemp(prefix="jobfsm-budget-")
    with open(os.path.join(work, "budget_handlers.py"), "w") as f:
        f.write(HANDLERS)
    out: dict[str, tuple[int, int]] = {}
    try:
        open_store(base).close()  # migrate once, outside the counts
        with psycopg.connect(base, autocommit=True) as admin:
            for shape in shapes:
                app = f"budget-{shape}-{uuid.uuid4().hex[:6]}"
                url = f"{base}?application_name={app}" + (f"&{options}" if options else "")
                if shape.startswith("worker"):
                    out[shape] = _worker(
                        admin, db, url, app, shape, base=base, amqp=amqp, work=work
                    )
                else:
                    out[shape] = _child(admin, db, url, app, shape)
    finally:
        drop_database(db)
    return out


def burst(n: int, pool_maxes: Sequence[int], rounds: int = 2) -> list[tuple[int, float]]:
    """[(pool_max, submits per second)] for `rounds` rounds of `n` submits at once."""
    from fsm import AsyncEngine

    db, base = create_database()

    async def run(pool_max: int) -> list[tuple[int, float]]:
        url = f"{base}?pool_max={pool_max}&pool_timeout=300"
        async with await AsyncEngine.open(url) as engine:
            await engine.submit("t.work", {})
            out = []
            for _ in range(rounds):
                start = time.perf_counter()
                await asyncio.gather(*(engine.submit("t.work", {"i": i}) for i in range(n)))
                out.append((pool_max, n / (time.perf_counter() - start)))
            return out

    try:
        return [row for pm in pool_maxes for row in asyncio.run(run(pm))]
    finally:
        drop_database(db)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--url-options", default="", help="e.g. pool_max=10&pool_min=1")
    parser.add_argument("--amqp", default=DEFAULT_AMQP)
    parser.add_argument("--burst", type=int, default=0, help="N submits at once (0: skip)")
    parser.add_argument("--pool-max", default="2,10")
    args = parser.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    for shape, (opened, peak) in count_shapes(shapes, args.url_options, args.amqp).items():
        print(f"{shape:12s} once opened: {opened:2d}   most while working: {peak:2d}", flush=True)
    if args.burst:
        for pool_max, rate in burst(args.burst, [int(p) for p in args.pool_max.split(",")]):
            print(f"pool_max={pool_max:<3d} {args.burst} submits at once: {rate:,.0f}/s")


if __name__ == "__main__":
    main()
