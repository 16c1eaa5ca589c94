"""A worker's CPU per job against its engine path alone, and against another tree, alternated.

    python -m benchmarks.worker_ab --stores postgres,sqlite --rounds 6 --jobs 10000
    python -m benchmarks.worker_ab --against /tmp/before --rounds 6    # A/B two trees

The goal "worker CPU within 1.25x of the engine path alone" compares two rows of the
throughput suite: `throughput.process_rate` (one `jobfsm worker` process of
`--threads` threads, the best 1-worker shape of the last full runs) and
`engine_path.drain` (the same claims and reports in one thread, claims of
`--threads`). On a loaded machine each moves by a third between runs, so this script
runs them back to back in rounds, each in a fresh interpreter, and prints every
round's ratio and the medians of the ratios: other load moves a pair less than it
moves the figures.

With `--against TREE` (a copy of the repository at another commit, e.g. made by
`git archive`), each round also runs the worker of that tree, in alternating order,
and prints this tree's worker CPU over that tree's: the before/after of a change.
Every measurement is one child process run with the tree's directory as its working
directory and first on its path, so its `jobfsm worker` processes run that tree too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD_LIMIT_S = 900.0


def _child(what: str, store: str, jobs: int, threads: int) -> None:
    from benchmarks import engine_path, throughput
    from benchmarks.harness import Config

    tmp = Path(tempfile.mkdtemp())
    load = os.getloadavg()[0]
    if what == "worker":
        cfg = Config.make(quick=False, tmp=tmp, jobs=jobs, repeats=1)
        rate, cpu, _ = throughput.process_rate(store, cfg, 1, threads)
        print(json.dumps({"load": load, "cpu": cpu, "rate": rate}))
    else:
        d = engine_path.drain(store, jobs, threads, tmp)
        print(json.dumps({"load": load, "cpu": d.total_us, "claim": d.claim_us,
                          "report": d.report_us}))  # fmt: skip


def _one(tree: Path, what: str, store: str, jobs: int, threads: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, "-m", "benchmarks.worker_ab", "--child", what, "--stores", store]
    argv += ["--jobs", str(jobs), "--threads", str(threads)]
    if tree != HERE:  # the other tree may not have this module: run this file there
        argv[1:3] = [str(Path(__file__).resolve())]
    done = subprocess.run(
        argv, cwd=tree, env=env, capture_output=True, text=True, timeout=CHILD_LIMIT_S,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{what} on {store} in {tree} failed:\n{done.stderr[-3000:]}")
    got: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_ab")
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=256, help="worker threads = claim size")
    parser.add_argument("--against", type=Path, help="another tree's worker, alternated")
    parser.add_argument("--child", choices=("worker", "engine"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if str(Path.cwd()) not in sys.path:  # run as a file in another tree: that tree first
            sys.path.insert(0, str(Path.cwd()))
        _child(args.child, args.stores, args.jobs, args.threads)
        return
    other: Path | None = args.against.resolve() if args.against else None
    ratios: dict[str, list[tuple[float, float | None]]] = {}
    for r in range(args.rounds):
        for store in args.stores.split(","):
            trees = [HERE] if other is None else [HERE, other][:: 1 if r % 2 == 0 else -1]
            cpu = {t: _one(t, "worker", store, args.jobs, args.threads) for t in trees}
            engine = _one(HERE, "engine", store, args.jobs, args.threads)
            mine = cpu[HERE]["cpu"]
            line = (f"{store} round {r + 1}, load {cpu[HERE]['load']:.1f}: worker "
                    f"{mine:.1f} us/job, engine path alone {engine['cpu']:.1f} "
                    f"(claim {engine['claim']:.1f}, report {engine['report']:.1f}): "
                    f"{mine / engine['cpu']:.3f}x")  # fmt: skip
            against = None
            if other is not None:
                theirs = cpu[other]["cpu"]
                against = mine / theirs
                share = theirs / engine["cpu"]
                line += (f"; the other tree's worker {theirs:.1f} ({share:.3f}x), "
                         f"this / other {against:.3f}")  # fmt: skip
            print(line, flush=True)
            ratios.setdefault(store, []).append((mine / engine["cpu"], against))
    for store, got in ratios.items():
        line = f"{store}: median worker / engine path {statistics.median(g[0] for g in got):.3f}x"
        if other is not None:
            line += f", this / other tree {statistics.median(g[1] or 0.0 for g in got):.3f}x"
        print(line)


if __name__ == "__main__":
    main()
