"""Instructions per `decide` call, counted by callgrind: a figure other load does not move.

    python -m benchmarks.callgrind_decide [--rounds 2000]

Runs `valgrind --tool=callgrind` four times on this module's `--child` mode: with 0
rounds (start-up and imports), with `--rounds` rounds of `decide` over the four steps
of `benchmarks.core.bench_decide` (lease, start, succeed, fail), and with the same
rounds of the bare record copy + audit entry, and of the plain record copy alone
(`attrs.evolve`, the yardstick of the goal `decide` / copy <= 1.5x). Prints
instructions per call for each and the ratios. Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.core import OWNER

CHILD_LIMIT_S = 900.0  # one valgrind run


def _rounds(mode: str, n: int) -> None:
    import attrs

    from fsm import Policy
    from fsm.lifecycle.core import decide
    from fsm.records import AuditEntry, Job

    policy, now = Policy.seeded(1), 1_000.0
    queued = decide(None, "submit", now, policy, id="B1", kind="k", payload_json="{}").job
    leased = decide(queued, "lease", now, policy, owner=OWNER).job
    running = decide(leased, "start", now, policy, fence=1).job
    steps: list[tuple[Job, str, dict[str, Any]]] = [
        (queued, "lease", {"owner": OWNER}),
        (leased, "start", {"fence": 1}),
        (running, "succeed", {"fence": 1, "result_json": "1"}),
        (running, "fail", {"fence": 1, "error": "boom"}),
    ]
    for _ in range(n):
        for job, event, args in steps:
            if mode == "decide":
                decide(job, event, now, policy, **args)
            elif mode == "copy":
                attrs.evolve(job, state="x", version=job.version + 1, updated_at=now)
            else:
                new = attrs.evolve(job, state="x", version=job.version + 1, updated_at=now)
                AuditEntry(
                    job_id=new.id, version=new.version, at=now, event=event,
                    from_state=job.state, to_state="x", fence=new.fence, attempt=new.attempt,
                )  # fmt: skip


def _count(mode: str, n: int, folder: Path) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    out = folder / f"{mode}-{n}.out"
    argv = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    argv += ["-m", "benchmarks.callgrind_decide", "--child", mode, "--rounds", str(n)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_LIMIT_S, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callgrind_decide")
    parser.add_argument("--rounds", type=int, default=2_000)
    parser.add_argument("--child", choices=("decide", "bare", "copy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _rounds(args.child, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        start = _count("decide", 0, Path(tmp))
        calls = args.rounds * 4
        ours = (_count("decide", args.rounds, Path(tmp)) - start) / calls
        bare = (_count("bare", args.rounds, Path(tmp)) - start) / calls
        copy = (_count("copy", args.rounds, Path(tmp)) - start) / calls
    print(f"decide: {ours:,.0f} instructions per call; bare record copy + audit entry: "
          f"{bare:,.0f}; ratio {ours / bare:.2f}; plain record copy: {copy:,.0f}; "
          f"ratio {ours / copy:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
