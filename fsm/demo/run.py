"""The demo driver: submit a workload, run worker processes, kill some, check everything.

Bounds: the run stops after `timeout` seconds whatever happens (and fails if a job
is not final by then); a worker asked to stop gets `STOP_GRACE` seconds before
SIGKILL; crashes are injected at most every `crash_every` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ..display.diagram import IMAGE_FORMATS, DiagramError, edge_counts, render, render_mermaid
from ..display.terminal import print_table, progress_bar
from ..errors import IllegalTransition, JobNotFound, TransientStoreError
from ..lifecycle.invariants import trail_problems
from ..lifecycle.spec import lifecycle
from ..ports import Migratable, ScanRequest
from ..records import AuditEntry, Job
from ..registry import STORE_ENV, open_store
from ..secrets import redact_url
from ..service.engine import Engine
from .app import KINDS, handlers, payload_for
from .effects import DEMO_DIR_ENV, LEDGER_NAME, Ledger
from .policy import demo_policy

#: seconds a worker asked to stop (SIGTERM) gets before SIGKILL
STOP_GRACE = 10.0
#: seconds between two progress lines when stdout is not a terminal
LOG_EVERY = 2.0
#: a worker process is killed only once it has been up (started, reclaimed the jobs of
#: the dead, leasing) for this long, so every incarnation gets work done
MIN_UPTIME = 1.0
#: crashes are injected during this share of the timeout at most, so the run can settle
CRASH_WINDOW = 0.5
#: seconds between two reads of every demo job (to show recoveries live)
RECOVERY_SCAN_EVERY = 0.5
#: share of jobs an operator cancels during the run
CANCEL_SHARE = 0.03
#: share of jobs submitted with a short delay (run_after in the future)
DELAYED_SHARE = 0.05
ACTOR = "demo-operator"


@attrs.define
class Config:
    jobs: int = 300
    workers: int = 3
    concurrency: int = 4
    crash_every: float = 1.5
    store: str | None = None
    seed: int | None = None
    directory: str | None = None
    timeout: float = 120.0


@attrs.define
class Result:
    ok: bool
    summary: dict[str, Any]
    problems: list[str]
    directory: Path


class _Workers:
    """The worker processes: started, killed with SIGKILL, restarted, stopped."""

    def __init__(self, cfg: Config, url: str, queue: str, seed: int, logdir: Path) -> None:
        self.cfg, self.url, self.queue, self.seed = cfg, url, queue, seed
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * cfg.workers
        self.ready: list[Path] = [logdir / f"ready-{slot}" for slot in range(cfg.workers)]
        self.started = 0
        self.unexpected_exits = 0

    def _spawn(self, slot: int) -> None:
        self.started += 1
        self.ready[slot] = self.logdir / f"worker-{slot}-{self.started}.ready"
        log_path = self.logdir / f"worker-{slot}-{self.started}.log"
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            self.procs[slot] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fsm.demo.worker",
                    "--queue",
                    self.queue,
                    "--concurrency",
                    str(self.cfg.concurrency),
                    "--seed",
                    str(self.seed + self.started),
                    "--ready-file",
                    str(self.ready[slot]),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # the store URL (maybe with a password) and the demo directory travel in
                # the environment: a command line is visible to every user through `ps`
                env={**os.environ, STORE_ENV: self.url, DEMO_DIR_ENV: str(self.logdir)},
            )

    def start(self) -> None:
        for slot in range(self.cfg.workers):
            self._spawn(slot)

    def check(self) -> None:
        """Restart any worker that exited on its own (counted: it should not happen)."""
        for slot, proc in enumerate(self.procs):
            if proc is not None and proc.poll() is not None:
                self.unexpected_exits += 1
                self._spawn(slot)

    def crash(self, rng: random.Random) -> int | None:
        """SIGKILL one worker up for MIN_UPTIME and start a replacement; the killed pid.

        Nothing happens (None) while any worker is still starting, so at most one
        worker is down at a time however slow the machine is.
        """
        if not all(path.exists() for path in self.ready):
            return None  # one worker down at a time: a replacement is still starting
        now = time.time()
        ready = [i for i, path in enumerate(self.ready) if now - path.stat().st_mtime >= MIN_UPTIME]
        if not ready:
            return None
        slot = rng.choice(ready)
        proc = self.procs[slot]
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_GRACE)
        self._spawn(slot)
        return proc.pid

    def stop(self) -> None:
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        until = time.monotonic() + STOP_GRACE
        for p in live:
            try:
                p.wait(timeout=max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _progress_line(elapsed: float, counts: Counter[str], crashes: int, recovered: int) -> str:
    lc = lifecycle()
    active = " ".join(f"{s} {counts.get(s, 0)}" for s in lc.states if not lc.is_final(s))
    final = " ".join(f"{s} {counts.get(s, 0)}" for s in lc.states if lc.is_final(s))
    return f"[{elapsed:5.1f}s] {active} | {final} | crashes {crashes}, recoveries {recovered}"


def run_demo(cfg: Config, echo: Callable[[str], None], *, live: bool) -> Result:
    started = time.monotonic()
    seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(1_000_000)
    rng = random.Random(seed)
    directory = Path(cfg.directory or tempfile.mkdtemp(prefix="jobfsm-demo-")).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    url = cfg.store or f"sqlite:///{directory / 'demo.db'}"
    ledger = Ledger(directory / LEDGER_NAME, demo_dir=directory)
    queue = f"demo-{int(time.time())}-{seed}"
    lc = lifecycle()

    store = open_store(url)
    if isinstance(store, Migratable):
        store.migrate()
    engine = Engine(store, policy=demo_policy(seed))
    for spec in handlers.values():
        engine.register_kind(spec.kind, spec.policy)

    echo(f"jobfsm demo: {cfg.jobs} jobs, {cfg.workers} worker processes x {cfg.concurrency}")
    echo(f"  seed {seed}; files in {directory}")
    echo(f"  store {redact_url(url)}, queue {queue}")
    echo(f"  a worker is killed with SIGKILL about every {cfg.crash_every:g}s and restarted")

    kinds = list(KINDS)
    weights = [KINDS[k][0] for k in kinds]
    items = []
    for _ in range(cfg.jobs):
        kind = rng.choices(kinds, weights)[0]
        opts: dict[str, Any] = {"queue": queue}
        if rng.random() < DELAYED_SHARE:
            opts["delay"] = rng.uniform(0.2, 1.5)
        items.append((kind, payload_for(kind, rng, str(ledger.root), seed), opts))
    jobs = engine.submit_many(items)
    ids = [j.id for j in jobs]
    cancel_ids = rng.sample(ids, max(1, int(cfg.jobs * CANCEL_SHARE)))
    to_cancel = {i: rng.uniform(0.0, 2.0) for i in cancel_ids}

    workers = _Workers(cfg, url, queue, seed, directory)
    workers.start()
    crashes: list[int] = []
    next_crash = time.monotonic() + cfg.crash_every * rng.uniform(0.7, 1.3)
    last_log = last_scan = 0.0
    recovered = too_late = 0
    counts: Counter[str] = Counter()
    timed_out = False
    stack = contextlib.ExitStack()
    try:
        bar = stack.enter_context(progress_bar("jobs final", cfg.jobs)) if live else None
        while True:
            now = time.monotonic()
            elapsed = now - started
            if elapsed > cfg.timeout:
                timed_out = True
                break
            try:
                for job_id, at in list(to_cancel.items()):
                    if elapsed >= at:
                        try:
                            engine.cancel(
                                job_id, actor=ACTOR, reason="the customer withdrew the request"
                            )
                        except IllegalTransition:
                            too_late += 1  # it finished first: nothing left to cancel
                        del to_cancel[job_id]
                counts = Counter(
                    {s: n for (q, s), n in engine.counts().items() if q == queue and n}
                )
                if now - last_scan >= RECOVERY_SCAN_EVERY:
                    mine = engine.scan(
                        ScanRequest(states=lc.states, queues=(queue,), limit=cfg.jobs)
                    )
                    recovered = sum(j.recoveries for j in mine)
                    last_scan = now
            except TransientStoreError as err:  # busy store: look again next tick
                echo(f"(store busy, retrying: {err})")
                time.sleep(0.2)
                continue
            active = sum(n for s, n in counts.items() if not lc.is_final(s))
            line = _progress_line(elapsed, counts, len(crashes), recovered)
            if bar is not None:
                final = sum(n for s, n in counts.items() if lc.is_final(s))
                bar.update(final, description=line)
            elif now - last_log >= LOG_EVERY:
                echo(line)
                last_log = now
            if active == 0 and not to_cancel:
                break
            workers.check()
            in_window = elapsed < cfg.timeout * CRASH_WINDOW
            if in_window and now >= next_crash and counts.get("running", 0) > 0:
                pid = workers.crash(rng)
                if pid is not None:
                    crashes.append(pid)
                    next_crash = now + cfg.crash_every * rng.uniform(0.7, 1.3)
            time.sleep(0.1)
    finally:
        stack.close()
        workers.stop()
    elapsed = time.monotonic() - started
    return _finish(
        engine=engine,
        ids=ids,
        ledger=ledger,
        directory=directory,
        seed=seed,
        crashes=crashes,
        workers=workers,
        elapsed=elapsed,
        timed_out=timed_out,
        echo=echo,
        url=url,
        cancels=(len(cancel_ids) - too_late, too_late),
    )


def _finish(
    *,
    engine: Engine,
    ids: list[str],
    ledger: Ledger,
    directory: Path,
    seed: int,
    crashes: list[int],
    workers: _Workers,
    elapsed: float,
    timed_out: bool,
    echo: Callable[[str], None],
    url: str,
    cancels: tuple[int, int],
) -> Result:
    lc = lifecycle()
    problems: list[str] = []
    if timed_out:
        problems.append("the run hit its timeout before every job was final")
    final: dict[str, Job] = {}
    trails: dict[str, list[AuditEntry]] = {}
    for job_id in ids:
        try:
            final[job_id] = engine.get(job_id)
            trails[job_id] = engine.history(job_id)
        except JobNotFound:
            problems.append(f"job {job_id} is lost: the store does not have it")
    lost = len(ids) - len(final)
    not_final = [j for j in final.values() if not lc.is_final(j.state)]
    for job in not_final:
        problems.append(f"job {job.id} ({job.kind}) is not final: {job.state}")
    for job in final.values():
        problems += trail_problems(job, trails[job.id], lc, engine.policy)

    effects = ledger.all()
    double = {i: r for i, r in effects.items() if len(r["commits"]) > 1}
    for job_id, rec in double.items():
        problems.append(f"job {job_id}: its effect was committed {len(rec['commits'])} times")
    succeeded_by_worker = [
        j
        for j in final.values()
        if j.state == "succeeded" and trails[j.id] and trails[j.id][-1].event == "succeed"
    ]
    for job in succeeded_by_worker:
        if not effects.get(job.id, {}).get("commits"):
            problems.append(f"job {job.id} succeeded but its effect was never committed")
    deduplicated = sum(len(r["deduplicated"]) for r in effects.values())
    fenced_out = sum(len(r["fenced_out"]) for r in effects.values())
    committed = sum(len(r["commits"]) for r in effects.values())

    states = Counter(j.state for j in final.values())
    edges = edge_counts(trails.values())
    retries = sum(n for (src, ev, dst), n in edges.items() if ev == "fail" and dst == "retry_wait")
    recoveries = sum(n for (src, ev, dst), n in edges.items() if ev == "expire")
    parked = sorted(
        (j for j in final.values() if j.state in lc.parked), key=lambda j: (j.kind, j.id)
    )

    diagram = directory / "lifecycle.mmd"
    title = f"demo seed {seed}: observed transition counts"
    diagram.write_text(render_mermaid(lc, counts=edges, title=title), encoding="utf-8")
    written = [diagram.name]
    try:
        svg = directory / "lifecycle.svg"
        svg.write_bytes(render(lc, IMAGE_FORMATS[0], counts=edges, title=title))
        written.append(svg.name)
    except DiagramError as err:
        written.append(f"(no SVG: {err})")

    summary: dict[str, Any] = {
        "ok": not problems,
        "seed": seed,
        "jobs": len(ids),
        "states": dict(sorted(states.items())),
        "by_kind": {
            kind: dict(Counter(j.state for j in final.values() if j.kind == kind)) for kind in KINDS
        },
        "retries": retries,
        "recoveries": recoveries,
        "crashes_injected": len(crashes),
        "cancels": {"applied": cancels[0], "too_late": cancels[1]},
        "worker_processes_started": workers.started,
        "unexpected_worker_exits": workers.unexpected_exits,
        "lost": lost,
        "not_final": len(not_final),
        "effects": {
            "committed": committed,
            "deduplicated": deduplicated,
            "fenced_out": fenced_out,
            "committed_twice": len(double),
        },
        "investigate": [
            {
                "id": j.id,
                "kind": j.kind,
                "reason": (j.last_error or "").splitlines()[0][:120] if j.last_error else "",
                "effect_committed": bool(effects.get(j.id, {}).get("commits")),
            }
            for j in parked
        ],
        "elapsed_seconds": round(elapsed, 2),
        "directory": str(directory),
        "store": redact_url(url),
        "problems": problems[:50],
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")

    echo("")
    print_table([[s, str(states[s])] for s in lc.states if states.get(s)], ["final state", "jobs"])
    echo(f"retries after transient errors: {retries}")
    echo(f"operator cancels: {cancels[0]} applied, {cancels[1]} too late (the job had finished)")
    echo(
        f"crashes injected (SIGKILL): {len(crashes)}; jobs recovered from dead workers: "
        f"{recoveries}"
    )
    echo(
        f"effects: {committed} committed, {deduplicated} deduplicated after a crash, "
        f"{fenced_out} fenced out, {len(double)} committed twice"
    )
    if parked:
        echo(f"in investigate ({len(parked)}): an operator decides (docs/operations.md)")
        for item in summary["investigate"][:10]:
            hint = "effect done: resolve" if item["effect_committed"] else "no effect: requeue"
            echo(f"  {item['id']} {item['kind']}: {item['reason']} [{hint}]")
        if len(parked) > 10:
            echo(f"  ... and {len(parked) - 10} more: jobfsm list --state investigate")
    if workers.unexpected_exits:
        echo(
            f"note: {workers.unexpected_exits} worker process(es) exited on their own and were "
            f"restarted; their logs are in {directory}"
        )
    echo(f"lost jobs: {lost}; not final: {len(not_final)}; invariant problems: {len(problems)}")
    for p in problems[:10]:
        echo(f"  PROBLEM: {p}")
    shown = [w if w.startswith("(") else str(directory / w) for w in written]
    echo(f"diagram with observed counts: {', '.join(shown)}")
    echo(f"summary: {directory / 'summary.json'}")
    echo(f"elapsed: {elapsed:.1f}s -- {'OK' if not problems else 'FAILED'}")
    engine.store.close()
    return Result(ok=not problems, summary=summary, problems=problems, directory=directory)
