"""Worker benchmarks: recovery latency after SIGKILL, and no-op throughput.

    python benchmarks/worker.py [--stores sqlite,postgres] [--jobs 8000] [--runs 5]

Every figure is printed with a ratio against a baseline measured in the same run:

- recovery: time from SIGKILL of a worker to the re-run of its job by another
  worker, p50 over `--runs`; baseline = the lease TTL, which is what recovery
  would take if death could not be confirmed.
- throughput: no-op jobs per second drained by 1 and by 4 `jobfsm worker`
  processes; baseline = one process leasing, starting and completing the same
  jobs through the Engine's batched calls with no worker around them (the
  engine-and-store ceiling for one process).

The machine has 2 cores and other work runs beside it: figures move between runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._services import fresh_store_url  # noqa: E402
from fsm import Engine, open_store  # noqa: E402
from fsm.owner import HOST_ENV, Identity  # noqa: E402
from fsm.worker.context import Context  # noqa: E402
from fsm.worker.handlers import Handlers  # noqa: E402

handlers = Handlers()


@handlers.handler("noop", queue="bench")
def noop(ctx: Context) -> None:
    return None


@handlers.handler("hold", queue="bench")
def hold(ctx: Context) -> None:
    """Runs until cancelled on attempt 1 (to be killed); returns at once afterwards."""
    folder = Path(ctx.payload["dir"])
    (folder / f"{ctx.attempt}.{os.getpid()}").touch()
    while ctx.attempt == 1 and not ctx.cancelled.wait(0.05):
        pass


# --- stores ----------------------------------------------------------------------------


def fresh_store(kind: str, tmp: Path) -> AbstractContextManager[str]:
    return fresh_store_url(kind, tmp)


def engine_for(url: str) -> Engine:
    return Engine(open_store(url), kinds={k: s.policy for k, s in handlers.items()})


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, url: str, *, host: str | None = None, ttl: float = 30.0, **opts: Any) -> Any:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop(HOST_ENV, None)
        if host:
            env[HOST_ENV] = host
        log = self.tmp / f"w{len(self.procs)}.log"
        cmd = [sys.executable, "-m", "fsm.cli", "worker", "--app", "benchmarks.worker:handlers"]
        cmd += ["--store", url, "--queues", "bench", "--lease-ttl", str(ttl)]
        cmd += ["--heartbeat", str(min(5.0, ttl / 3)), "--log-level", "WARNING"]
        cmd += ["--ready-file", str(log.with_suffix(".ready"))]
        for key, value in opts.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    @staticmethod
    def wait_started(proc: Any, timeout: float = 60.0) -> None:
        """Until the worker has run its start-up sweep and claims."""
        wait_for(lambda: proc.log.with_suffix(".ready").exists(), timeout)

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):
                p.wait(10)
        self.procs.clear()


def wait_for(check: Callable[[], object], timeout: float, step: float = 0.01) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if check():
            return
        time.sleep(step)
    raise TimeoutError("benchmark step timed out")


# --- recovery latency --------------------------------------------------------------------


def recovery(kind: str, tmp: Path, runs: int, cross_host: bool) -> list[float]:
    """Seconds from SIGKILL of the owner to the start of the re-run, per run."""
    out = []
    for _ in range(runs):
        with fresh_store(kind, tmp) as url:
            engine = engine_for(url)
            procs = Procs(tmp)
            marks = Path(tempfile.mkdtemp(dir=tmp))
            try:
                job = engine.submit("hold", {"dir": str(marks)})
                a = procs.start(url, host="bench-a" if cross_host else None)
                try:
                    wait_for(lambda m=marks: list(m.glob("1.*")), 60)
                except TimeoutError:
                    print((tmp / f"w{len(procs.procs) - 1}.log").read_text()[-3000:])
                    raise
                b = procs.start(url, host="bench-b" if cross_host else None)
                procs.wait_started(b)  # B is up and sweeping
                killed = time.time()
                a.send_signal(signal.SIGKILL)
                a.wait(10)
                wait_for(lambda m=marks: list(m.glob("2.*")), 60)
                out.append(next(iter(marks.glob("2.*"))).stat().st_mtime - killed)
                assert engine.get(job.id).recoveries == 1
            finally:
                procs.stop_all()
                engine.store.close()
    return out


# --- throughput --------------------------------------------------------------------------


def submit(engine: Engine, n: int) -> None:
    for start in range(0, n, 1000):
        engine.submit_many([("noop", None, {})] * min(1000, n - start))


def drained(engine: Engine, n: int) -> bool:
    return engine.counts().get(("bench", "succeeded"), 0) >= n


def baseline(kind: str, tmp: Path, n: int, batch: int = 64) -> float:
    """Jobs/s: one process claims, starts and completes in batches, no worker around it."""
    with fresh_store(kind, tmp) as url:
        engine = engine_for(url)
        try:
            submit(engine, n)
            owner = Identity().owner
            began = time.perf_counter()
            done = 0
            while done < n:
                jobs = engine.claim(owner, ("bench",), limit=batch)
                started = engine.report_many([(j, "start", {"fence": j.fence}) for j in jobs])
                ok = engine.report_many(
                    [(j, "succeed", {"fence": j.fence, "result_json": "null"}) for j in started]  # type: ignore[union-attr]
                )
                done += len(ok)
            return n / (time.perf_counter() - began)
        finally:
            engine.store.close()


def throughput(kind: str, tmp: Path, n: int, processes: int, concurrency: int) -> float:
    """Jobs/s drained by `processes` worker processes already up when the jobs arrive."""
    with fresh_store(kind, tmp) as url:
        engine = engine_for(url)
        procs = Procs(tmp)
        try:
            started = [
                procs.start(url, concurrency=concurrency, poll_interval=0.05)
                for _ in range(processes)
            ]
            for proc in started:
                procs.wait_started(proc)  # workers up and polling
            submit(engine, n)
            began = time.perf_counter()
            wait_for(lambda: drained(engine, n), 600, step=0.05)
            return n / (time.perf_counter() - began)
        finally:
            procs.stop_all()
            engine.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for kind in args.stores.split(","):
            print(f"== {kind} ==")
            ttl = 30.0
            same = recovery(kind, tmp, args.runs, cross_host=False)
            p50 = statistics.median(same)
            print(
                f"recovery after SIGKILL, same host: p50 {p50:.2f}s max {max(same):.2f}s "
                f"over {len(same)} runs; baseline lease TTL {ttl:.0f}s; ratio {p50 / ttl:.3f}"
            )
            if kind == "postgres":
                cross = recovery(kind, tmp, args.runs, cross_host=True)
                p50 = statistics.median(cross)
                print(
                    f"recovery after SIGKILL, other host (liveness lock): p50 {p50:.2f}s "
                    f"max {max(cross):.2f}s; baseline lease TTL {ttl:.0f}s; "
                    f"ratio {p50 / ttl:.3f}"
                )
            base = baseline(kind, tmp, args.jobs)
            print(f"baseline: engine batches in one process, no worker: {base:,.0f} jobs/s")
            one = throughput(kind, tmp, args.jobs, 1, args.concurrency)
            print(f"1 worker process:  {one:,.0f} jobs/s; ratio to baseline {one / base:.2f}")
            four = throughput(kind, tmp, args.jobs, 4, args.concurrency)
            print(
                f"4 worker processes: {four:,.0f} jobs/s ({four / 4:,.0f} per process); "
                f"ratio to 1 process {four / one:.2f}; to baseline {four / base:.2f}"
            )


if __name__ == "__main__":
    main()
