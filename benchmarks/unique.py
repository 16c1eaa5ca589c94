"""What a unique key costs a submit: submits per second with `unique=` keys against
plain submits, measured in the same run, and racing submitters of the same keys.

    python -m benchmarks.unique --store postgres --jobs 2000 --racers 4 --repeats 3

Each round submits `--jobs` jobs one `engine.submit` at a time to a fresh store (a
fresh file, or a fresh PostgreSQL database), after a short warm-up. The shapes
alternate within each repeat:

- `plain`: no key (the baseline of the one-submitter shapes);
- `unique, new keys`: every submit has a key no job holds, so every one checks its
  scope (the live states) and writes;
- `unique, duplicates`: the keys of the first submits again, so every one finds its
  twin and returns it, writing nothing;
- `unique, period`: new keys with a one-hour window (`Unique(key, period=3600)`);
- `plain, racing`: `--racers` threads, each with its own store handle (as separate
  processes hold), each submitting `--jobs / --racers` plain jobs (the baseline of
  the racing shape);
- `unique, racing`: the same threads each submitting the same `--jobs / --racers`
  keys in the same order, so every key is submitted by every racer at nearly the same
  moment; the run fails unless exactly one job per key was stored.

It prints the median rate of each shape over the repeats, the jobs stored, and the
ratio of each shape to its baseline of the same run. A test runs it at a tiny size
(tests/acceptance/test_unique_bench.py); it holds no figure to a bound.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from rich.console import Console
from rich.table import Table

from benchmarks.services import fresh_store_url
from fsm import Engine, Unique, open_store

KIND = "bench.unique"
PLAIN, NEW, DUPLICATES, PERIOD = "plain", "unique, new keys", "unique, duplicates", "unique, period"
PLAIN_RACING, UNIQUE_RACING = "plain, racing", "unique, racing"
SHAPES = (PLAIN, NEW, DUPLICATES, PERIOD, PLAIN_RACING, UNIQUE_RACING)
#: each shape's baseline: the ratio printed is to the baseline's median of the same run
BASELINE = {
    PLAIN: PLAIN,
    NEW: PLAIN,
    DUPLICATES: PLAIN,
    PERIOD: PLAIN,
    PLAIN_RACING: PLAIN_RACING,
    UNIQUE_RACING: PLAIN_RACING,
}
#: submits before the clock starts (connections opened, statements prepared)
WARM = 20
HOUR = 3600.0


def _unique(shape: str, key: str) -> Unique | None:
    if shape == PLAIN:
        return None
    return Unique(key, period=HOUR) if shape == PERIOD else Unique(key)


def one_submitter(url: str, shape: str, jobs: int) -> tuple[float, int]:
    """(submits per second, jobs stored) of one thread submitting `jobs` times."""
    engine = Engine(open_store(url))
    try:
        for i in range(WARM):
            engine.submit(KIND, {"i": i}, queue="warm")
        keys = [f"key-{i}" for i in range(jobs)]
        if shape == DUPLICATES:  # the twins the timed submits will find
            engine.submit_many([(KIND, {"i": i}, {"unique": k}) for i, k in enumerate(keys)])
        started = time.perf_counter()
        for i, key in enumerate(keys):
            engine.submit(KIND, {"i": i}, unique=_unique(shape, key))
        seconds = time.perf_counter() - started
        stored = sum(n for (q, _s), n in engine.counts().items() if q != "warm")
    finally:
        engine.store.close()
    return jobs / seconds, stored


def racing(url: str, shape: str, jobs: int, racers: int) -> tuple[float, int]:
    """(submits per second over every racer, jobs stored): `racers` threads with a
    store handle each, each submitting `jobs // racers` times; with keys, the same keys
    in the same order."""
    each = jobs // racers
    engines = [Engine(open_store(url)) for _ in range(racers)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(racers + 1)

    def submit(n: int) -> None:
        engine = engines[n]
        try:
            for i in range(WARM // racers + 1):
                engine.submit(KIND, {"i": i}, queue="warm")
            barrier.wait()
            for i in range(each):
                key = f"key-{i}"
                engine.submit(
                    KIND, {"i": i}, unique=Unique(key) if shape == UNIQUE_RACING else None
                )
        except BaseException as err:  # reported by the main thread
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(racers)]
    try:
        for t in threads:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        if errors:
            raise SystemExit(f"{shape}: a racer failed: {errors[0]!r}")
        stored = sum(n for (q, _s), n in engines[0].counts().items() if q != "warm")
    finally:
        for engine in engines:
            engine.store.close()
    expected = each if shape == UNIQUE_RACING else each * racers
    if stored != expected:
        raise SystemExit(f"{shape}: {stored} jobs stored, {expected} expected")
    return each * racers / seconds, stored


def one_round(store: str, shape: str, jobs: int, racers: int) -> tuple[float, int]:
    """(submits per second, jobs stored) of one shape on a fresh store of kind `store`."""
    with fresh_store_url(store) as url:
        Engine(open_store(url)).store.close()  # created (migrated) outside the clock
        if shape in (PLAIN_RACING, UNIQUE_RACING):
            return racing(url, shape, jobs, racers)
        return one_submitter(url, shape, jobs)


def ratios(median: dict[str, float]) -> dict[str, float]:
    """Each shape's median rate over its baseline's median of the same run."""
    return {s: median[s] / median[BASELINE[s]] for s in median}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.unique",
        description="Submits per second with unique keys against plain submits, one "
        "submitter and racing submitters of the same keys, in the same run.",
    )
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--jobs", type=int, default=2000, help="submits per round [2000]")
    parser.add_argument("--racers", type=int, default=4, help="racing threads [4]")
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds [3]")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeats < 1 or not 1 <= args.racers <= args.jobs:
        parser.error("--jobs and --repeats must be at least 1, --racers 1 to --jobs")
    rates: dict[str, list[float]] = {s: [] for s in SHAPES}
    stored: dict[str, int] = {}
    for _ in range(args.repeats):
        for shape in SHAPES:
            rate, stored[shape] = one_round(args.store, shape, args.jobs, args.racers)
            rates[shape].append(rate)
    median = {s: statistics.median(r) for s, r in rates.items()}
    ratio = ratios(median)
    title = (
        f"{args.store}: {args.jobs:,} submits per round, {args.racers} racers, "
        f"median of {args.repeats}"
    )
    table = Table("shape", title=title)
    for column in ("submits/s", "jobs stored", "ratio"):
        table.add_column(column, justify="right")
    table.add_column("ratio to")
    for shape in SHAPES:
        table.add_row(
            shape,
            f"{median[shape]:,.0f}",
            f"{stored[shape]:,}",
            f"{ratio[shape]:.2f}x",
            BASELINE[shape],
        )
    Console(width=100).print(table)
    print(
        f"ratio to plain (same run): {NEW} {ratio[NEW]:.2f}x, {DUPLICATES} "
        f"{ratio[DUPLICATES]:.2f}x, {PERIOD} {ratio[PERIOD]:.2f}x; "
        f"{UNIQUE_RACING} to {PLAIN_RACING} {ratio[UNIQUE_RACING]:.2f}x"
    )


if __name__ == "__main__":
    main()
