"""Real-process chaos: worker processes killed with SIGKILL while they run jobs.

N `jobfsm worker` processes run a mix of job kinds on SQLite or PostgreSQL; a
killer sends SIGKILL to a random worker every 1-2 s and starts a fresh one in
its place. Every handler writes a fenced outside effect into a separate SQLite
file (accepted only with a fence above the last one seen for the job; every try
is logged). At the end:

- no job is lost: every submitted job is in the store, terminal or parked in
  investigate, and a parked job says why (last_error);
- no fenced effect is committed twice: no two runs of a job ever tried to commit
  under the same fence, a retry-unsafe job committed at most once, and every
  succeeded job's result comes from a run whose effect was accepted;
- every job's audit trail replays to its record and is a legal chain of the
  spec (fsm.lifecycle.invariants.trail_problems);
- a summary of kills, recoveries and final states.

Small size in CI: tests/integration/chaos/. Large size (figures in docs/reliability.md):

    python benchmarks/chaos.py --store sqlite --jobs 3000 --workers 4
    python benchmarks/chaos.py --store postgresql://postgres@127.0.0.1:5432/postgres --jobs 3000

The handlers below are the app the workers run (`--app benchmarks.chaos:handlers`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make fsm, adapters and benchmarks importable
    sys.path.insert(0, str(REPO))

from benchmarks.runner import Workers, jobfsm_worker  # noqa: E402
from fsm import Engine, Policy, open_store  # noqa: E402
from fsm.lifecycle.invariants import trail_problems  # noqa: E402
from fsm.lifecycle.spec import lifecycle  # noqa: E402
from fsm.ports import ScanRequest  # noqa: E402
from fsm.worker.context import Context  # noqa: E402
from fsm.worker.handlers import Handlers  # noqa: E402

#: bounds of the run (each overridable on the command line)
KILL_EVERY = (1.0, 2.0)  # seconds between two kills, uniform
LEASE_TTL = 3.0
HEARTBEAT = 0.5
SWEEP = 0.5
MAX_RECOVERIES = 3
WAVES = 8  # jobs arrive in this many waves during the chaos window
EFFECT_BUSY_MS = 30_000  # the effects file is shared by every worker: bounded lock wait

handlers = Handlers()


# --- the app: four kinds, each ends with a fenced outside effect ---------------------


def _effect(ctx: Context) -> dict[str, Any]:
    """Commit the job's outside effect, fenced: accepted only above the last fence seen."""
    conn = sqlite3.connect(ctx.payload["effects"], timeout=EFFECT_BUSY_MS / 1000)
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT fence FROM effects WHERE job_id = ?", (ctx.job.id,)).fetchone()
        accepted = row is None or ctx.fence > row[0]
        if accepted:
            conn.execute(
                "INSERT INTO effects VALUES (?, ?, 1) ON CONFLICT (job_id) DO UPDATE "
                "SET fence = excluded.fence, commits = effects.commits + 1",
                (ctx.job.id, ctx.fence),
            )
        conn.execute(
            "INSERT INTO tries VALUES (?, ?, ?, ?)",
            (ctx.job.id, ctx.fence, os.getpid(), int(accepted)),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return {"fence": ctx.fence, "accepted": accepted}


def _nap(ctx: Context, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        ctx.check_cancelled()
        time.sleep(0.02)


def fast(ctx: Context) -> dict[str, Any]:
    return _effect(ctx)


def slow(ctx: Context) -> dict[str, Any]:
    _nap(ctx, float(ctx.payload.get("seconds", 0.5)))
    return _effect(ctx)


def flaky(ctx: Context) -> dict[str, Any]:
    if ctx.attempt <= int(ctx.payload.get("fails", 1)):
        raise RuntimeError(f"flaky: attempt {ctx.attempt} fails on purpose")
    return _effect(ctx)


def unsafe(ctx: Context) -> dict[str, Any]:
    _nap(ctx, float(ctx.payload.get("seconds", 0.2)))
    return _effect(ctx)


handlers.register("fast", fast, retry_safe=True)
handlers.register("slow", slow, retry_safe=True)
handlers.register("flaky", flaky, retry_safe=True, max_attempts=5)
handlers.register("unsafe", unsafe, retry_safe=False)


# --- the harness ---------------------------------------------------------------------


@attrs.frozen
class ChaosResult:
    store: str
    workers: int
    jobs: int
    kills: int
    seconds: float
    states: dict[str, int]
    recoveries: int
    jobs_recovered: int
    lost: list[str]
    not_final: list[str]
    parked_without_reason: list[str]
    double_commits: list[str]
    unsafe_rerun: list[str]
    #: succeeded jobs whose recorded result is a run whose effect was refused (a stale run won)
    stale_results: list[str]
    trail_problems: list[str]
    effects_accepted: int
    effects_refused: int

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.not_final
            or self.parked_without_reason
            or self.double_commits
            or self.unsafe_rerun
            or self.stale_results
            or self.trail_problems
        )

    def summary(self) -> str:
        return json.dumps(attrs.asdict(self) | {"ok": self.ok}, indent=2, sort_keys=True)


def _init_effects(path: Path) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE effects (job_id TEXT PRIMARY KEY, fence INTEGER NOT NULL, "
            "commits INTEGER NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE tries (job_id TEXT NOT NULL, fence INTEGER NOT NULL, "
            "pid INTEGER NOT NULL, accepted INTEGER NOT NULL)"
        )
    conn.close()


def _jobs(n: int, effects: Path, rng: random.Random) -> list[tuple[str, Any, dict[str, Any]]]:
    items: list[tuple[str, Any, dict[str, Any]]] = []
    for i in range(n):
        roll = rng.random()
        payload: dict[str, Any] = {"effects": str(effects), "n": i}
        if roll < 0.60:
            kind = "fast"
        elif roll < 0.75:
            kind = "slow"
            payload["seconds"] = round(rng.uniform(0.2, 1.0), 2)
        elif roll < 0.92:
            kind = "flaky"
            payload["fails"] = rng.randint(1, 2)
        else:
            kind = "unsafe"
            payload["seconds"] = round(rng.uniform(0.1, 0.4), 2)
        items.append((kind, payload, {}))
    return items


def _submit(engine: Engine, items: list[tuple[str, Any, dict[str, Any]]]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(items), 500):
        ids.extend(job.id for job in engine.submit_many(items[start : start + 500]))
    return ids


def _final_count(engine: Engine) -> int:
    counts = engine.counts()
    spec = lifecycle()
    return sum(n for (_, state), n in counts.items() if spec.is_final(state))


def run_chaos(
    url: str,
    *,
    jobs: int,
    workers: int,
    workdir: Path,
    concurrency: int = 4,
    chaos_seconds: float = 60.0,
    settle_seconds: float = 60.0,
    seed: int = 0,
) -> ChaosResult:
    """Run the chaos at one size; the store at `url` must be empty."""
    rng = random.Random(seed)
    effects = workdir / "effects.db"
    _init_effects(effects)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    engine = Engine(open_store(url), kinds={k: s.policy for k, s in handlers.items()})
    pool = Workers(logs, grace=10.0)  # SIGTERM at the end, SIGKILL after 10 s
    argv = jobfsm_worker(
        "benchmarks.chaos:handlers", url, concurrency=concurrency, poll_interval=0.1,
        lease_ttl=LEASE_TTL, heartbeat=HEARTBEAT, sweep_interval=SWEEP,
        max_recoveries=MAX_RECOVERIES, shutdown_grace=5, log_level="WARNING",
    )  # fmt: skip
    kills = 0
    started = time.monotonic()
    try:
        # Jobs arrive in waves over the first 3/4 of the chaos window, so the killer
        # strikes while work is in flight however fast the machine is.
        items = _jobs(jobs, effects, rng)
        waves = [items[i::WAVES] for i in range(WAVES)]
        wave_gap = 0.75 * chaos_seconds / WAVES
        ids = _submit(engine, waves.pop(0))
        next_wave = time.monotonic() + wave_gap
        live = [pool.start(*argv) for _ in range(workers)]
        chaos_until = started + chaos_seconds
        next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        while time.monotonic() < chaos_until and (waves or _final_count(engine) < jobs):
            time.sleep(0.1)
            if waves and time.monotonic() >= next_wave:
                ids += _submit(engine, waves.pop(0))
                next_wave = time.monotonic() + wave_gap
            if time.monotonic() >= next_kill:
                slot = rng.randrange(len(live))
                live[slot].send_signal(signal.SIGKILL)
                live[slot].wait(timeout=10)
                kills += 1
                live[slot] = pool.start(*argv)
                next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        while waves:  # a chaos window too short for every wave: submit the rest now
            ids += _submit(engine, waves.pop(0))
        settle_until = time.monotonic() + settle_seconds
        while time.monotonic() < settle_until and _final_count(engine) < jobs:
            time.sleep(0.2)
        seconds = time.monotonic() - started
    finally:
        pool.stop()
    return _verdict(
        engine, url=url, workers=workers, ids=ids, effects=effects, kills=kills, seconds=seconds
    )


def _verdict(
    engine: Engine,
    *,
    url: str,
    workers: int,
    ids: list[str],
    effects: Path,
    kills: int,
    seconds: float,
) -> ChaosResult:
    spec = lifecycle()
    policy = Policy()
    listed = {
        j.id: j for j in engine.store.scan(ScanRequest(states=spec.states, limit=len(ids) + 1000))
    }
    lost = [i for i in ids if i not in listed]
    not_final = [f"{j.id} {j.state}" for j in listed.values() if not spec.is_final(j.state)]
    parked = [j.id for j in listed.values() if j.state == "investigate" and not j.last_error]
    problems: list[str] = []
    for job in listed.values():
        problems.extend(trail_problems(job, engine.store.history(job.id), spec, policy))
    conn = sqlite3.connect(effects)
    try:
        tries = conn.execute("SELECT job_id, fence, accepted FROM tries").fetchall()
    finally:
        conn.close()
    accepted: Counter[tuple[str, int]] = Counter()
    tried: Counter[tuple[str, int]] = Counter()
    per_job: Counter[str] = Counter()
    for job_id, fence, ok in tries:
        tried[(job_id, fence)] += 1
        if ok:
            accepted[(job_id, fence)] += 1
            per_job[job_id] += 1
    # Two tries under one fence mean two runs held the same lease: two live owners.
    double = sorted(f"{j} fence {f} tried {n}x" for (j, f), n in tried.items() if n > 1)
    unsafe_rerun = sorted(
        f"{j} committed {n}x"
        for j, n in per_job.items()
        if j in listed and listed[j].kind == "unsafe" and n > 1
    )
    stale = sorted(
        j.id
        for j in listed.values()
        if j.state == "succeeded" and not (isinstance(j.result, dict) and j.result.get("accepted"))
    )
    engine.store.close()
    return ChaosResult(
        store=url.split("://", 1)[0],
        workers=workers,
        jobs=len(ids),
        kills=kills,
        seconds=round(seconds, 1),
        states=dict(Counter(j.state for j in listed.values())),
        recoveries=sum(j.recoveries for j in listed.values()),
        jobs_recovered=sum(1 for j in listed.values() if j.recoveries),
        lost=lost,
        not_final=not_final[:20],
        parked_without_reason=parked[:20],
        double_commits=double[:20],
        unsafe_rerun=unsafe_rerun[:20],
        stale_results=stale[:20],
        trail_problems=problems[:20],
        effects_accepted=sum(accepted.values()),
        effects_refused=len(tries) - sum(accepted.values()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", help="'sqlite' (a fresh file) or a URL")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--chaos-seconds", type=float, default=120.0)
    parser.add_argument("--settle-seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jobfsm-chaos-") as tmp:
        url = f"sqlite:///{tmp}/jobs.db" if args.store == "sqlite" else args.store
        result = run_chaos(
            url,
            jobs=args.jobs,
            workers=args.workers,
            workdir=Path(tmp),
            concurrency=args.concurrency,
            chaos_seconds=args.chaos_seconds,
            settle_seconds=args.settle_seconds,
            seed=args.seed,
        )
    print(result.summary())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
