"""The scale suite: does jobfsm stay as fast with a big table, and does a worker stay small?

For each store (SQLite, PostgreSQL) and each N in `cfg.scale_rows`, one fresh store
is filled with N succeeded jobs of the worker's queue (4 audit rows each, written in
bulk by the helpers of `benchmarks/stores.py`; the fill time is printed and kept as a
fact), and then measured twice:

- `scale.<store>.rows<N>.lease_p50` / `lease_p99` (ms): one `Engine.claim(limit=1)`,
  the call a worker makes, timed in this process, with a small queued backlog;
- `scale.<store>.rows<N>.throughput` (jobs/s): no-op jobs drained by one
  `jobfsm worker` process that is up and polling before the jobs are submitted.

`scale.<store>.worker_memory` (MiB) is the RSS of one `jobfsm worker` process
(VmRSS from /proc) at each tenth of `cfg.memory_jobs` no-op jobs. The jobs are fed in
batches, at most two batches queued at a time, so the figure is the worker's own
footprint, not the size of a backlog: the point is to show it flat.

Every store is a fresh SQLite file under `cfg.tmp` or a fresh PostgreSQL database,
removed afterwards; every worker process is killed when its task ends.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks._services import fresh_store_url
from benchmarks.harness import Config, Measurement, Task, wait_for
from benchmarks.stores import _pg_fill_finished, bulk_finished_sqlite, percentile
from benchmarks.worker import Procs, engine_for
from fsm import Engine, Job, open_store
from fsm.owner import Identity
from fsm.ports import ScanRequest

STORES = ("sqlite", "postgres")
#: the queue `benchmarks.worker`'s no-op handler serves; the finished rows live there too
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


def plan(cfg: Config) -> list[Task]:
    """Per store: one task per table size (lease latency, throughput), then worker memory."""
    tasks = [
        Task(f"scale {store}, {rows:,} finished rows", partial(table, cfg, store, rows))
        for store in STORES
        for rows in cfg.scale_rows
    ]
    tasks += [
        Task(
            f"scale {store}, worker memory over {cfg.memory_jobs:,} jobs",
            partial(memory, cfg, store),
        )
        for store in STORES
    ]
    return tasks


# --- stores ------------------------------------------------------------------------------


def fill(store: str, url: str, rows: int) -> float:
    """Migrate the store and write `rows` succeeded jobs into QUEUE; seconds taken."""
    began = time.perf_counter()
    handle = open_store(url)  # migrates
    try:
        if rows and store == "sqlite":
            bulk_finished_sqlite(handle, rows, time.time(), queue=QUEUE)
    finally:
        handle.close()
    if rows and store == "postgres":
        _pg_fill_finished(url, "public", rows, queue=QUEUE)
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


def submit(engine: Engine, n: int, chunk: int = 1000) -> list[str]:
    """Submit `n` no-op jobs in chunks; their ids in order."""
    ids: list[str] = []
    for start in range(0, n, chunk):
        jobs = engine.submit_many([("noop", None, {})] * min(chunk, n - start))
        ids += [job.id for job in jobs]
    return ids


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
    while rest := engine.claim(owner, (QUEUE,), limit=500):
        leased += rest
    for start in range(0, len(leased), 500):
        running = report(engine, leased[start : start + 500], "start", {})
        report(engine, running, "succeed", {"result_json": "null"})
    return times


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
    procs = Procs(folder)
    try:
        proc = procs.start(url, concurrency=CONCURRENCY, poll_interval=POLL_INTERVAL)
        procs.wait_started(proc)
        submit(engine, jobs)
        began = time.perf_counter()
        try:
            wait_for(
                lambda: drained(engine, states), DRAIN_TIMEOUT, f"{jobs} jobs drained", step=0.01
            )
        except TimeoutError:
            print(proc.log.read_text()[-3000:], file=sys.stderr)
            raise
        return jobs / (time.perf_counter() - began)
    finally:
        procs.stop_all()
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
    return out


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
        procs = Procs(folder)
        try:
            proc = procs.start(url, concurrency=CONCURRENCY, poll_interval=POLL_INTERVAL)
            procs.wait_started(proc)
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
                    if time.monotonic() > until or proc.poll() is not None:
                        print(proc.log.read_text()[-3000:], file=sys.stderr)
                        raise TimeoutError(f"scale: {store} worker stuck at {through - batch} jobs")
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
            procs.stop_all()
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


if __name__ == "__main__":  # a quick look: python -m benchmarks.scale [--full]
    with tempfile.TemporaryDirectory() as tmp:
        config = Config.make(quick="--full" not in sys.argv, tmp=Path(tmp), repeats=1)
        for task in plan(config):
            began = time.perf_counter()
            for m in task.run():
                print(m.to_json())
            print(f"# {task.label}: {time.perf_counter() - began:.1f}s", file=sys.stderr)
