"""The scale suite: does jobfsm stay as fast with a big table, and does a worker stay small?

For each store (SQLite, PostgreSQL) and each N in `cfg.scale_rows`, one fresh store
is filled with N succeeded jobs of the worker's queue (4 audit rows each, written in
bulk by `benchmarks/fill.py`; the fill time is printed and kept as a
fact), and then measured twice:

- `scale.<store>.rows<N>.lease_p50` / `lease_p99` (ms): one `Engine.claim(limit=1)`,
  the call a worker makes, timed in this process, with a small queued backlog;
- `scale.<store>.rows<N>.throughput` (jobs/s): no-op jobs drained by one
  `jobfsm worker` process that is up and polling before the jobs are submitted.

SQLite stops at `SQLITE_MAX_ROWS` (its fill is a Python loop: about 55 s per million
rows, so 10M would be ten minutes of setup); PostgreSQL takes every size, 10,000,000
in the full run. On PostgreSQL, once those are measured, the same table is pruned:

- `scale.postgres.rows<N>.prune` (jobs/s removed): one `Engine.prune` with the
  default retention (succeeded: 7 days) in batches of `PRUNE_BATCH`, the CLI's
  `--batch`, and `max_batches` large enough for one call to remove everything past
  retention (the fill spreads the finished times over 70 days: 9/10 of the rows);
- `scale.postgres.rows<N>.lease_p99_pruning` (ms): `Engine.claim(limit=1)` from a
  second connection, every `PRUNE_SAMPLE_GAP` s while the prune runs;
- `scale.postgres.rows<N>.lease_p99_pruned` (ms): the lease figure again, on what the
  prune left (dead rows and all: the benchmark server runs without autovacuum).

`scale.<store>.worker_memory` (MiB) is the RSS of one `jobfsm worker` process
(VmRSS from /proc) at each tenth of `cfg.memory_jobs` no-op jobs. The jobs are fed in
batches, at most two batches queued at a time, so the figure is the worker's own
footprint, not the size of a backlog: the point is to show it flat.

Every store is a fresh SQLite file under `cfg.tmp` or a fresh PostgreSQL database,
removed afterwards; every worker process is killed when its task ends.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import fill as fills
from benchmarks import runner
from benchmarks.harness import Config, Measurement, Task, wait_for
from benchmarks.noop import APP, QUEUE_ENV, engine_for
from benchmarks.noop import submit as submit_noop
from benchmarks.services import fresh_store_url
from benchmarks.stores import percentile
from fsm import Engine, Job, open_store
from fsm.ports import ScanRequest
from fsm.service.identity import Identity

STORES = ("sqlite", "postgres")
#: the queue `benchmarks.noop`'s worker serves by default; the finished rows live there too
QUEUE = "bench"
#: worker settings, as in `benchmarks/worker.py`'s throughput runs
CONCURRENCY = 32
POLL_INTERVAL = 0.05
#: RSS samples over a memory run, one at each tenth of the jobs
MEMORY_SAMPLES = 10
#: leases timed per repeat, and jobs queued beyond them so that no claim finds the queue empty
LEASE_SAMPLES = 1000
BACKLOG_SPARE = 100
#: the longest a drain or a memory run may take before the task fails
DRAIN_TIMEOUT = 600.0
#: the largest SQLite table the suite fills (see the module docstring)
SQLITE_MAX_ROWS = 1_000_000
#: prune batch: `jobfsm prune --batch`'s default
PRUNE_BATCH = 1000
#: seconds between two timed claims while a prune runs; jobs queued for them at a time
PRUNE_SAMPLE_GAP = 0.01
PRUNE_SAMPLE_BACKLOG = 200
#: claims timed after the prune in a quick run (a full run times LEASE_SAMPLES)
QUICK_PRUNED_SAMPLES = 200


def plan(cfg: Config) -> list[Task]:
    """Per store: one task per table size (lease latency, throughput), then worker memory."""
    return table_tasks(cfg, STORES) + memory_tasks(cfg, STORES)


def sizes(cfg: Config, store: str) -> list[int]:
    """The table sizes measured on `store`: SQLite stops at SQLITE_MAX_ROWS."""
    return [n for n in cfg.scale_rows if store != "sqlite" or n <= SQLITE_MAX_ROWS]


def table_tasks(cfg: Config, stores: tuple[str, ...]) -> list[Task]:
    return [
        Task(f"scale {store}, {rows:,} finished rows", partial(table, cfg, store, rows))
        for store in stores
        for rows in sizes(cfg, store)
    ]


def memory_tasks(cfg: Config, stores: tuple[str, ...]) -> list[Task]:
    return [
        Task(
            f"scale {store}, worker memory over {cfg.memory_jobs:,} jobs",
            partial(memory, cfg, store),
        )
        for store in stores
    ]


# --- stores ------------------------------------------------------------------------------


def fill(store: str, url: str, rows: int) -> float:
    """Migrate the store and write `rows` succeeded jobs into QUEUE; seconds taken."""
    began = time.perf_counter()
    open_store(url).close()  # migrates
    if rows and store == "sqlite":
        fills.finished_sqlite(url, rows, time.time(), queue=QUEUE)
    if rows and store == "postgres":
        fills.finished_postgres(url, "public", rows, queue=QUEUE)
    seconds = time.perf_counter() - began
    if rows:
        print(
            f"scale: {store} filled with {rows:,} finished jobs in {seconds:.1f}s", file=sys.stderr
        )
    return seconds


def unfinished(engine: Engine) -> list[str]:
    """States of the spec a job can still leave; a job in none of them has finished."""
    spec = engine.spec
    return [state for state in spec.states if not spec.is_final(state)]


def drained(engine: Engine, states: list[str]) -> bool:
    """No job of QUEUE left unfinished: one indexed lookup, not a count of the table."""
    return not engine.scan(ScanRequest(states=tuple(states), queues=(QUEUE,), limit=1))


def submit(engine: Engine, n: int) -> list[str]:
    """Submit `n` no-op jobs in batches; their ids in order."""
    return [job.id for job in submit_noop(engine, n)]


def start_worker(workers: runner.Workers, url: str) -> Any:
    """One `jobfsm worker` of the no-op app on `url`, up and polling when this returns."""
    ready = workers.folder / f"ready-{workers.started + 1}"
    argv = runner.jobfsm_worker(
        APP, url, queues=QUEUE, concurrency=CONCURRENCY, poll_interval=POLL_INTERVAL,
        log_level="WARNING", ready_file=ready,
    )  # fmt: skip
    proc = workers.start(*argv)
    workers.wait(ready.exists, 60.0, "the worker's start")
    return proc


def finished_rows(engine: Engine) -> int:
    return sum(
        n
        for (queue, state), n in engine.counts().items()
        if queue == QUEUE and engine.spec.is_final(state)
    )


# --- lease latency and throughput with N finished rows -------------------------------------


def lease_times(engine: Engine, samples: int) -> list[float]:
    """Seconds per `claim(limit=1)` over `samples` claims, with `samples + BACKLOG_SPARE`
    jobs queued; afterwards every job leased or left is run to success, as a worker
    would, so the table holds only finished jobs again."""
    submit(engine, samples + BACKLOG_SPARE)
    owner = Identity().owner
    times: list[float] = []
    leased = []
    for _ in range(samples):
        began = time.perf_counter()
        got = engine.claim(owner, (QUEUE,), limit=1)
        times.append(time.perf_counter() - began)
        if len(got) != 1:
            raise RuntimeError(f"scale: claim found no queued job after {len(times) - 1} leases")
        leased += got
    finish(engine, owner, leased)
    return times


def finish(engine: Engine, owner: Any, leased: list[Job]) -> None:
    """Lease what is still queued, then run every leased job to success, as a worker would."""
    while rest := engine.claim(owner, (QUEUE,), limit=500):
        leased += rest
    for start in range(0, len(leased), 500):
        running = report(engine, leased[start : start + 500], "start", {})
        report(engine, running, "succeed", {"result_json": "null"})


def report(engine: Engine, jobs: list[Job], event: str, args: dict[str, Any]) -> list[Job]:
    """`event` on every job in one `report_many`; any report refused is an error."""
    out = engine.report_many([(j, event, {"fence": j.fence, **args}) for j in jobs])
    done = [j for j in out if isinstance(j, Job)]
    if len(done) != len(jobs):
        refused = next(e for e in out if not isinstance(e, Job))
        raise RuntimeError(f"scale: {event} refused for {len(jobs) - len(done)} jobs: {refused}")
    return done


def drain_rate(cfg: Config, url: str, engine: Engine, jobs: int) -> float:
    """Jobs/s drained by one worker process that is polling before the jobs arrive."""
    states = unfinished(engine)
    folder = Path(tempfile.mkdtemp(prefix="scale-", dir=cfg.tmp))
    try:
        with runner.Workers(folder, {QUEUE_ENV: QUEUE}, grace=0) as workers:
            start_worker(workers, url)
            submit(engine, jobs)
            began = time.perf_counter()
            done = lambda: drained(engine, states)  # noqa: E731
            workers.wait(done, DRAIN_TIMEOUT, f"{jobs} jobs drained", step=0.01)
            return jobs / (time.perf_counter() - began)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def table(cfg: Config, store: str, rows: int) -> list[Measurement]:
    """Lease latency, then worker throughput, on one store holding `rows` finished jobs."""
    samples = LEASE_SAMPLES
    jobs = min(cfg.jobs, 2000)
    prefix = f"scale.{store}.rows{rows}"
    with fresh_store_url(store, cfg.tmp) as url:
        fill_s = fill(store, url, rows)
        engine = engine_for(url)
        try:
            runs = [lease_times(engine, samples) for _ in range(cfg.repeats)]
            present = finished_rows(engine)
            rates = [drain_rate(cfg, url, engine, jobs) for _ in range(cfg.repeats)]
            if (done := finished_rows(engine)) != present + jobs * cfg.repeats:
                raise RuntimeError(
                    f"scale: {store} finished {done - present} of {jobs * cfg.repeats} jobs"
                )
            pruned = prune(cfg, url, engine, rows, prefix) if store == "postgres" and rows else []
        finally:
            engine.store.close()
    filled = {"finished_rows": rows}
    latency_settings = {
        "samples": samples,
        "backlog": samples + BACKLOG_SPARE,
        "call": "Engine.claim(limit=1)",
    }
    out = [
        Measurement(
            key=f"{prefix}.lease_{q}",
            label=f"{store}: lease latency {q}, {rows:,} finished rows",
            unit="ms",
            values=[percentile(t, quantile) * 1000 for t in runs],
            settings={**latency_settings, **filled},
            facts={
                "fill_seconds": round(fill_s, 2),
                "mean_ms": round(statistics.fmean(t for run in runs for t in run) * 1000, 3),
            },
            note=f"{samples} single claims per repeat from {samples + BACKLOG_SPARE} queued jobs, "
            "timed in the benchmark process",
        )
        for q, quantile in (("p50", 0.5), ("p99", 0.99))
    ]
    out.append(
        Measurement(
            key=f"{prefix}.throughput",
            label=f"{store}: no-op jobs/s, 1 worker process, {rows:,} finished rows",
            unit="jobs/s",
            values=rates,
            settings={
                "jobs": jobs,
                "processes": 1,
                "concurrency": CONCURRENCY,
                "poll_interval": POLL_INTERVAL,
                **filled,
            },
            facts={"fill_seconds": round(fill_s, 2), "finished_rows_present": present},
            note="the worker is up before the jobs are submitted; timed from the end of "
            "submit_many to no unfinished job left in the queue (polled every 10 ms); the "
            "jobs of the latency runs have finished too (finished_rows_present)",
        )
    )
    for m in pruned:
        m.facts["fill_seconds"] = round(fill_s, 2)
    return out + pruned


# --- prune at N finished rows (PostgreSQL) -------------------------------------------------


class LeaseSampler(threading.Thread):
    """Times one `Engine.claim(limit=1)` every PRUNE_SAMPLE_GAP s on its own engine (its
    own connection pool) until stopped, queueing PRUNE_SAMPLE_BACKLOG jobs at a time
    (untimed); the leased jobs are run to success afterwards."""

    def __init__(self, url: str) -> None:
        super().__init__(name="scale-lease-sampler", daemon=True)
        self.engine = engine_for(url)
        self.halt = threading.Event()
        self.times: list[float] = []
        self.submitted = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        owner = Identity().owner
        leased: list[Job] = []
        try:
            queued = 0
            while not self.halt.is_set():
                if not queued:
                    submit(self.engine, PRUNE_SAMPLE_BACKLOG)
                    self.submitted += PRUNE_SAMPLE_BACKLOG
                    queued = PRUNE_SAMPLE_BACKLOG
                began = time.perf_counter()
                got = self.engine.claim(owner, (QUEUE,), limit=1)
                self.times.append(time.perf_counter() - began)
                if len(got) != 1:
                    raise RuntimeError("scale: a claim during the prune found no queued job")
                leased += got
                queued -= 1
                self.halt.wait(PRUNE_SAMPLE_GAP)
            finish(self.engine, owner, leased)
        except BaseException as e:  # handed to the measuring thread by stop()
            self.error = e
        finally:
            self.engine.store.close()

    def stop(self) -> list[float]:
        self.halt.set()
        self.join(timeout=DRAIN_TIMEOUT)
        if self.error is not None:
            raise RuntimeError("scale: the lease sampler failed") from self.error
        if self.is_alive():
            raise TimeoutError("scale: the lease sampler did not stop")
        return self.times


def database_mib(url: str) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return round(int(row[0]) / 2**20, 1) if row else float("nan")


def prune(cfg: Config, url: str, engine: Engine, rows: int, prefix: str) -> list[Measurement]:
    """One `Engine.prune` (default retention, batches of PRUNE_BATCH) over the filled
    table, timed, with claims timed beside it; then the lease figure on what it left."""
    before_rows = finished_rows(engine)
    before_mib = database_mib(url)
    max_batches = rows // PRUNE_BATCH + 2  # one call is enough for every row past retention
    sampler = LeaseSampler(url)
    sampler.start()
    began = time.perf_counter()
    try:
        removed = engine.prune(limit=PRUNE_BATCH, max_batches=max_batches)
    finally:
        seconds = time.perf_counter() - began
        during = sampler.stop()
    kept = finished_rows(engine)
    if removed == 0 or kept != before_rows - removed + sampler.submitted:
        raise RuntimeError(
            f"scale: prune removed {removed} of {before_rows} finished jobs, {kept} left"
        )
    samples = QUICK_PRUNED_SAMPLES if cfg.quick else LEASE_SAMPLES
    after = lease_times(engine, samples)
    print(
        f"scale: postgres pruned {removed:,} of {before_rows:,} finished jobs in "
        f"{seconds:.1f}s ({removed / seconds:,.0f} jobs/s)",
        file=sys.stderr,
    )
    call = f"Engine.prune(limit={PRUNE_BATCH}, max_batches={max_batches})"
    return [
        Measurement(
            key=f"{prefix}.prune",
            label=f"postgres: prune, jobs/s removed, {rows:,} finished rows",
            unit="jobs/s",
            values=[removed / seconds],
            settings={"call": call, "retention": "default (succeeded: 7 days)", "rows": rows},
            facts={
                "removed": removed,
                "seconds": round(seconds, 2),
                "finished_before": before_rows,
                "finished_after": kept,
                "database_mib_before": before_mib,
                "database_mib_after": database_mib(url),
            },
            note="one timed call, each batch its own transaction (the jobs, their audit rows "
            "and dependency rows deleted in one statement); a claim was timed beside it "
            f"every {PRUNE_SAMPLE_GAP}s",
        ),
        Measurement(
            key=f"{prefix}.lease_p99_pruning",
            label=f"postgres: lease latency p99 during the prune, {rows:,} finished rows",
            unit="ms",
            values=[percentile(during, 0.99) * 1000],
            settings={"call": "Engine.claim(limit=1)", "gap_s": PRUNE_SAMPLE_GAP, "rows": rows},
            facts={
                "samples": len(during),
                "p50_ms": round(percentile(during, 0.5) * 1000, 3),
                "max_ms": round(max(during) * 1000, 3),
            },
            note="claims from a second engine (its own pool) in a thread of the benchmark "
            "process, while the prune ran",
        ),
        Measurement(
            key=f"{prefix}.lease_p99_pruned",
            label=f"postgres: lease latency p99 after the prune, {rows:,} finished rows",
            unit="ms",
            values=[percentile(after, 0.99) * 1000],
            settings={"call": "Engine.claim(limit=1)", "samples": samples, "rows": rows},
            facts={"p50_ms": round(percentile(after, 0.5) * 1000, 3), "finished_left": kept},
            note="as the lease figures above, on the table the prune left (its dead rows not "
            "vacuumed: the benchmark server runs without autovacuum)",
        ),
    ]


# --- worker memory -----------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"scale: no VmRSS for process {pid}")


def memory(cfg: Config, store: str) -> list[Measurement]:
    """RSS of one worker at each tenth of `cfg.memory_jobs` no-op jobs, fed in batches."""
    total = cfg.memory_jobs
    batch = max(100, min(1000, total // 30))
    marks = [total * k // MEMORY_SAMPLES for k in range(1, MEMORY_SAMPLES + 1)]
    samples: list[float] = []
    at_jobs: list[int] = []
    with fresh_store_url(store, cfg.tmp) as url:
        fill(store, url, 0)
        engine = engine_for(url)
        folder = Path(tempfile.mkdtemp(prefix="scale-", dir=cfg.tmp))
        workers = runner.Workers(folder, {QUEUE_ENV: QUEUE}, grace=0)
        try:
            proc = start_worker(workers, url)
            ready = rss_mib(proc.pid)
            final = {s for s in engine.spec.states if engine.spec.is_final(s)}
            # (id of the last job of a batch, jobs submitted up to and including it)
            queued: list[tuple[str, int]] = []
            submitted = 0

            def feed() -> None:
                nonlocal submitted
                n = min(batch, total - submitted)
                if n > 0:
                    ids = submit(engine, n)
                    submitted += n
                    queued.append((ids[-1], submitted))

            feed()
            feed()
            began = time.perf_counter()
            until = time.monotonic() + DRAIN_TIMEOUT
            while queued:
                last_id, through = queued[0]
                if engine.get(last_id).state not in final:
                    workers.check()
                    if time.monotonic() > until:
                        what = f"scale: {store} worker stuck at {through - batch} jobs"
                        raise TimeoutError(f"{what}\n{workers.tail()}")
                    time.sleep(0.005)
                    continue
                queued.pop(0)
                while marks and marks[0] <= through:
                    marks.pop(0)
                    samples.append(rss_mib(proc.pid))
                    at_jobs.append(through)
                feed()
            seconds = time.perf_counter() - began
            wait_for(lambda: drained(engine, unfinished(engine)), 60, "the last jobs finished")
            done = finished_rows(engine)
            if done != total:
                raise RuntimeError(f"scale: {store} worker finished {done} of {total} jobs")
        finally:
            workers.stop()
            engine.store.close()
            shutil.rmtree(folder, ignore_errors=True)
    growth = samples[-1] - samples[0]
    span = at_jobs[-1] - at_jobs[0]
    return [
        Measurement(
            key=f"scale.{store}.worker_memory",
            label=f"{store}: worker RSS over {total:,} no-op jobs",
            unit="MiB",
            values=[round(s, 2) for s in samples],
            settings={
                "jobs": total,
                "batch": batch,
                "max_queued": 2 * batch,
                "concurrency": CONCURRENCY,
                "poll_interval": POLL_INTERVAL,
                "executor": "thread",
            },
            facts={
                "jobs": total,
                "first_mib": round(samples[0], 2),
                "last_mib": round(samples[-1], 2),
                "growth_mib": round(growth, 2),
                "growth_per_10k_jobs_kib": round(growth * 1024 / (span / 10_000), 1)
                if span
                else 0.0,
                "ready_mib": round(ready, 2),
                "sampled_at_jobs": at_jobs,
                "jobs_per_second": round(total / seconds, 1),
            },
            note=f"VmRSS of the worker process at each tenth of the jobs; jobs submitted "
            f"{batch} at a time, the next batch once the oldest queued batch's last job "
            f"finished (at most {2 * batch} queued)",
        )
    ]


def main(argv: list[str] | None = None) -> None:
    """Run part of the suite and print its figures as JSON lines (to --out as well)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description="The scale suite, or part of it, e.g. PostgreSQL at 10M rows only: "
        "python -m benchmarks.scale --full --store postgres --rows 10000000 --no-memory",
    )
    parser.add_argument("--full", action="store_true", help="the full run's sizes and repeats")
    parser.add_argument("--store", default=",".join(STORES), help="comma-separated stores")
    parser.add_argument("--rows", help="comma-separated table sizes [the run's scale_rows]")
    parser.add_argument("--repeats", type=int, help="runs per figure [quick 1, full 3]")
    parser.add_argument("--no-memory", action="store_true", help="skip worker memory")
    parser.add_argument("--out", type=Path, help="also write the JSON lines here")
    args = parser.parse_args(argv)
    stores = tuple(args.store.split(","))
    if unknown := set(stores) - set(STORES):
        parser.error(f"unknown store(s) {', '.join(sorted(unknown))}")
    rows = tuple(int(n) for n in args.rows.split(",")) if args.rows else None
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.make(
            quick=not args.full, tmp=Path(tmp), repeats=args.repeats, scale_rows=rows
        )
        tasks = table_tasks(config, stores)
        if not args.no_memory:
            tasks += memory_tasks(config, stores)
        out: list[Measurement] = []
        for task in tasks:
            began = time.perf_counter()
            got = task.run()
            out += got
            for m in got:
                print(m.to_json(), flush=True)
            print(f"# {task.label}: {time.perf_counter() - began:.1f}s", file=sys.stderr)
    if args.out:
        args.out.write_text("".join(m.to_json() + "\n" for m in out))


if __name__ == "__main__":
    main()
