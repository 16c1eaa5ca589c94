"""What a crash-suite job leaves behind: one small file per start, completion and effect.

Every handler of every system (jobfsm, procrastinate, dramatiq, celery) calls `record`
in the folder named by its payload, so the driver reads the same evidence for all of
them: when each run started (wall clock, written by the handler itself), in which
process, and how many runs completed or committed their effect. This module imports
nothing heavy: worker processes of every peer import it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def record(folder: str, what: str, **info: Any) -> None:
    """Leave `<what>.<pid>.<ns>` holding the wall-clock time, the pid and `info` (atomic)."""
    data = {"t": time.time(), "pid": os.getpid(), **info}
    final = Path(folder) / f"{what}.{os.getpid()}.{time.time_ns()}"
    tmp = Path(folder) / f"_{uuid.uuid4().hex}"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, final)


@dataclass(frozen=True)
class Mark:
    t: float
    pid: int
    info: dict[str, Any]


def read(folder: Path, what: str) -> list[Mark]:
    """Every `what` mark in `folder`, oldest first."""
    out = []
    for path in folder.glob(f"{what}.*"):
        data = json.loads(path.read_text())
        out.append(Mark(t=float(data.pop("t")), pid=int(data.pop("pid")), info=data))
    return sorted(out, key=lambda m: m.t)


def nap(seconds: float) -> None:
    """The job's work: a plain sleep that notices no cancellation (a handler that hangs on I/O)."""
    time.sleep(seconds)


def unfenced_job(folder: str, seconds: float, effect: bool) -> None:
    """The peers' job: start, work, commit the effect with no fence, done."""
    record(folder, "start")
    nap(seconds)
    if effect:
        record(folder, "effect")
    record(folder, "done")
