"""Handler-start stamps for the latency suite: every system's handler writes one line.

A handler of job number `n` appends `"<n> <CLOCK_MONOTONIC seconds>\\n"` to the file
named by `STAMPS_ENV` as its first act. CLOCK_MONOTONIC is one clock for every
process of the machine, so the submitting process compares these stamps with the
moments its submits returned. One `os.write` of a short line to a file opened with
O_APPEND is one append, whole, even from many processes and threads at once.

Every system's handler calls `stamp`: jobfsm's (`benchmarks.stamp_app`) and the
"stamp" task of each peer's app (`benchmarks/peers/*_app.py`). This module imports
nothing of jobfsm or of a peer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STAMPS_ENV = "BENCH_STAMPS"

_fd: int | None = None  # opened on the first stamp of this process (after any fork)
_pid = 0


def stamp(n: int) -> None:
    """Append job `n`'s start moment to the stamps file (`STAMPS_ENV`)."""
    global _fd, _pid
    now = time.monotonic()
    if _fd is None or _pid != os.getpid():
        _fd = os.open(os.environ[STAMPS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _pid = os.getpid()
    os.write(_fd, f"{int(n)} {now:.9f}\n".encode())


def read(path: Path) -> dict[int, float]:
    """Job number -> its first start stamp (a job started twice keeps its first)."""
    out: dict[int, float] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 2:  # a line being written right now
            continue
        out.setdefault(int(parts[0]), float(parts[1]))
    return out
