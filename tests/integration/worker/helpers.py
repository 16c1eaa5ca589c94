"""Worker processes for the integration tests: started, killed, stopped and reaped for real."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg

from fsm import Engine, open_store
from fsm.service.identity import HOST_ENV

REPO = Path(__file__).resolve().parents[3]
APP = "tests.integration.worker.app:handlers"


def wait_for(check: Callable[[], object], timeout: float, what: str, step: float = 0.02) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if check():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _writing(store_url: str) -> bool:
    """Whether some client of the store holds a write transaction open right now: the
    SQLite file's write lock is taken, or a PostgreSQL session other than this one is
    inside a transaction in the store's database (a test's database is its own)."""
    if store_url.startswith("sqlite:"):
        path = store_url.split("sqlite:///", 1)[1].split("?", 1)[0]
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()  # rolls back the lock it took, if it took it
        return False
    with psycopg.connect(store_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        ).fetchone()
    return bool(row and row[0])


#: how many times `freeze` tries to catch a worker between two transactions
FREEZE_TRIES = 200


def freeze(proc: subprocess.Popen[bytes], store_url: str) -> None:
    """SIGSTOP a worker at an instant it holds no transaction open in the store.

    A process frozen inside a write transaction holds the store's lock for as long as
    it stays frozen (SQLite's one writer; a PostgreSQL row lock): every other worker
    then waits on the lock, which is not the zombie a test means to make (a worker
    that lost its lease and wakes up later). Bounded: FREEZE_TRIES tries, 10 ms apart.
    """
    for _ in range(FREEZE_TRIES):
        proc.send_signal(signal.SIGSTOP)
        if not _writing(store_url):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"worker {proc.pid} held a transaction at each of {FREEZE_TRIES} tries")


def markers(folder: Path, job_id: str, what: str, attempt: int | None = None) -> list[Path]:
    pattern = f"{job_id}.{attempt if attempt is not None else '*'}.{what}.*"
    return sorted(folder.glob(pattern))


class Workers:
    """Starts `jobfsm worker` processes; kills whatever is left at the end (even on failure)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        store_url: str,
        *,
        host_id: str | None = None,
        ttl: float = 3.0,
        heartbeat: float = 0.5,
        concurrency: int = 2,
        executor: str = "thread",
        shutdown_grace: float = 30.0,
        max_recoveries: int = 3,
        queues: str = "default",
        app: str = APP,
        cancel_grace: float | None = None,
    ) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.pop(HOST_ENV, None)
        if host_id is not None:
            env[HOST_ENV] = host_id
        log = self.tmp / f"worker-{len(self.procs)}.log"
        cmd = [
            sys.executable,
            "-m",
            "fsm.cli",
            "worker",
            "--app",
            app,
            "--store",
            store_url,
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--executor",
            executor,
            "--poll-interval",
            "0.1",
            "--lease-ttl",
            str(ttl),
            "--heartbeat",
            str(heartbeat),
            "--sweep-interval",
            "0.5",
            "--shutdown-grace",
            str(shutdown_grace),
            "--max-recoveries",
            str(max_recoveries),
            "--log-level",
            "INFO",
            "--ready-file",
            str(log.with_suffix(".ready")),
        ]
        if cancel_grace is not None:
            cmd += ["--cancel-grace", str(cancel_grace)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    @staticmethod
    def log_of(proc: subprocess.Popen[bytes]) -> str:
        path: Path = proc.log  # type: ignore[attr-defined]
        return path.read_text(errors="replace")

    def wait_serving(self, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        wait_for(self.ready_file(proc).exists, timeout, "worker to start")

    @staticmethod
    def ready_file(proc: subprocess.Popen[bytes]) -> Path:
        path: Path = proc.log  # type: ignore[attr-defined]
        return path.with_suffix(".ready")

    @staticmethod
    def kill9(proc: subprocess.Popen[bytes]) -> float:
        """SIGKILL and reap; returns the wall-clock time of the kill."""
        at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        return at

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.send_signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)


def engine_factory(registry: Mapping[str, Any]) -> Iterator[Callable[[str], Engine]]:
    """Engines that submit with `registry`'s kind policies; their stores close at the end
    (a fixture body: `yield from engine_factory(handlers)`)."""
    engines: list[Engine] = []

    def make(url: str) -> Engine:
        engine = Engine(open_store(url), kinds={k: spec.policy for k, spec in registry.items()})
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.store.close()
