"""jobfsm in the crash suite: `jobfsm worker` processes on SQLite or PostgreSQL."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.crash import common
from benchmarks.crash.jobfsm_app import QUEUE, create_effects, handlers
from benchmarks.harness import Config, Measurement, version_of
from benchmarks.runner import Workers, jobfsm_worker
from benchmarks.services import fresh_store_url
from fsm import Engine, open_store
from fsm.service.identity import HOST_ENV

DOCS = "docs/workers.md"
DEFAULT_TTL = 30.0
DEFAULT_HEARTBEAT = 5.0


class JobfsmSession:
    def __init__(
        self,
        url: str,
        folder: Path,
        group: Workers,
        *,
        cross_host: bool,
        ttl: float,
        heartbeat: float,
    ) -> None:
        self.url = url
        self.folder = folder
        self.group = group
        self.cross_host = cross_host
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.engine = Engine(open_store(url), kinds={k: s.policy for k, s in handlers.items()})
        self.job_id: str | None = None

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        env = {HOST_ENV: f"crash-host-{index}"} if self.cross_host else {}
        argv = jobfsm_worker(
            "benchmarks.crash.jobfsm_app:handlers", self.url, queues=QUEUE, concurrency=1,
            lease_ttl=self.ttl, heartbeat=self.heartbeat, log_level="WARNING",
            ready_file=self.folder / f"ready{index}",
        )  # fmt: skip
        proc = self.group.start(*argv, env=env)
        proc.ready_file = self.folder / f"ready{index}"  # type: ignore[attr-defined]
        return proc

    def ready(self, proc: subprocess.Popen[bytes]) -> bool:
        return bool(proc.ready_file.exists())  # type: ignore[attr-defined]

    def submit(self, payload: dict[str, Any]) -> None:
        create_effects(self.folder)
        self.job_id = self.engine.submit("crash_sleep", payload).id

    def fate(self) -> str:
        assert self.job_id is not None
        state = self.engine.get(self.job_id).state
        if state in ("failed", "cancelled"):
            return "lost"
        if state == "investigate":
            return "stuck"
        return "waiting"


def system(
    kind: str,
    *,
    cross_host: bool = False,
    ttl: float = DEFAULT_TTL,
    heartbeat: float = DEFAULT_HEARTBEAT,
) -> common.System:
    @contextmanager
    def session(folder: Path, group: Workers, sizes: common.Sizes) -> Iterator[JobfsmSession]:
        with fresh_store_url(kind, folder) as url:
            s = JobfsmSession(
                url, folder, group, cross_host=cross_host, ttl=ttl, heartbeat=heartbeat
            )
            try:
                yield s
            finally:
                group.stop()
                s.engine.store.close()

    return session


def _settings(kind: str, ttl: float, heartbeat: float, **more: Any) -> dict[str, Any]:
    return {
        "version": version_of("jobfsm"),
        "store": kind,
        "lease_ttl_s": ttl,
        "heartbeat_s": heartbeat,
        "sweep_interval_s": 1.0,
        "executor": "thread",
        **more,
    }


def kill(cfg: Config, kind: str, cross_host: bool) -> Measurement:
    sizes = common.Sizes.of(cfg)
    where = "cross_host" if cross_host else "same_host"
    if cross_host:
        liveness = (
            "PostgreSQL session advisory lock per worker (pg_try_advisory_lock confirms death)"
        )
        note = (
            "A worker on another host confirms the death through the dead process's "
            "advisory lock, freed by PostgreSQL when its session ends, and expires the job at "
            f"its next sweep ({DOCS}, PostgreSQL liveness)."
        )
    else:
        liveness = "same host: pid probe (ProcessLookupError = dead)"
        note = (
            "A worker on the same host confirms the owner's death (pid gone) and expires its "
            "jobs at its next sweep (every 1 s), without waiting for the lease TTL "
            f"({DOCS}, Recovery sweep)."
        )
    return common.measure_kill(
        f"recovery.jobfsm.{kind}.{where}",
        label=f"jobfsm {kind}, kill -9, {'other host (liveness)' if cross_host else 'same host'}",
        system=system(kind, cross_host=cross_host),
        sizes=sizes,
        tmp=cfg.tmp,
        settings=_settings(
            kind,
            DEFAULT_TTL,
            DEFAULT_HEARTBEAT,
            death_confirmed_by=liveness,
            fresh_worker="already started and ready",
        ),
        note=note,
    )


def zombie(cfg: Config, kind: str) -> Measurement:
    # A frozen process is alive (pid there, advisory lock held): only its lease can lapse,
    # so the quick run shortens the lease to fit its budget.
    ttl, heartbeat = (3.0, 0.5) if cfg.quick else (DEFAULT_TTL, DEFAULT_HEARTBEAT)
    sizes = common.Sizes.of(cfg, bound=max(cfg.recovery_wait, ttl + 2 * heartbeat + 10.0))
    return common.measure_zombie(
        f"recovery.jobfsm.{kind}.zombie",
        label=f"jobfsm {kind}, SIGSTOP then SIGCONT (zombie), fenced effect",
        system=system(kind, ttl=ttl, heartbeat=heartbeat),
        sizes=sizes,
        tmp=cfg.tmp,
        settings=_settings(
            kind,
            ttl,
            heartbeat,
            effect="sqlite UPSERT ... WHERE excluded.fence > effects.fence (ctx.fence)",
        ),
        note=(
            "A frozen owner's lease lapses and another worker re-runs the job under a higher "
            "fence; an outside write guarded by ctx.fence from the stale owner cannot commit "
            f"({DOCS}, Fencing outside effects)."
        ),
    )
