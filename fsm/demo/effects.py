"""A fenced effects ledger: the "outside world" the demo's handlers write to.

One JSON file per job under a directory, changed only under an exclusive file
lock and replaced atomically (write, fsync, rename), so a `kill -9` mid-write
leaves the previous version intact. A commit carries the job's fence:

- a fence lower than the highest the ledger has seen for the job is *fenced out*
  (a stale owner; nothing is written but the rejection);
- a job whose effect is already committed is *deduplicated* (a rerun after a crash
  that happened between the effect and the report: the effect is not done again);
- otherwise the effect is *committed*.

The demo checks afterwards that no job has more than one commit.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: the demo directory, set by `jobfsm demo` for its workers: ledgers live only below it
DEMO_DIR_ENV = "JOBFSM_DEMO_DIR"
#: without it (a worker started by hand), a ledger must live in a directory whose
#: name starts with this, as the demo's own directories do
DEMO_DIR_PREFIX = "jobfsm-demo"
#: the name of the ledger directory inside the demo directory
LEDGER_NAME = "effects"

COMMITTED = "committed"
DEDUPLICATED = "deduplicated"
FENCED_OUT = "fenced_out"


def ledger_root(path: str | Path, demo_dir: str | Path | None = None) -> Path:
    """The ledger directory a payload names, if it is a demo's: `<demo dir>/effects`.

    A job's payload is outside input: a payload naming any other place (/etc, a
    symlink out of the demo directory) is refused, so the demo's handlers never
    write outside a demo directory. Without `JOBFSM_DEMO_DIR`, the `jobfsm-demo*`
    directory must be this user's and writable by no one else (`_mine`): another
    user's directory of that name (in /tmp, say) is refused.
    """
    root = Path(os.path.realpath(path))
    allowed = demo_dir or os.environ.get(DEMO_DIR_ENV)
    home = root.parent
    inside = (
        home == Path(os.path.realpath(allowed))
        if allowed
        else home.name.startswith(DEMO_DIR_PREFIX) and _mine(home)
    )
    if root.name != LEDGER_NAME or not inside:
        where = (
            str(allowed)
            if allowed
            else f"a directory named {DEMO_DIR_PREFIX}* of this user, writable by no other"
        )
        raise ValueError(f"ledger {str(path)!r} is not {LEDGER_NAME}/ inside {where}")
    return root


def _mine(path: Path) -> bool:
    """Whether `path` is a directory (not a symlink) owned by this user that neither its
    group nor others may write to, as `tempfile.mkdtemp` makes them."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


class Ledger:
    def __init__(self, root: str | Path, *, demo_dir: str | Path | None = None) -> None:
        self.root = ledger_root(root, demo_dir)
        self.root.mkdir(mode=0o700, exist_ok=True)

    def _file(self, job_id: str) -> Path:
        if not job_id.isalnum():
            raise ValueError(f"not a job id: {job_id!r}")
        return self.root / f"{job_id}.json"

    @contextmanager
    def _locked(self, job_id: str) -> Iterator[None]:
        # O_NOFOLLOW: a symlink planted as the lock file is refused, never followed
        flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW
        fd = os.open(self.root / f"{job_id}.lock", flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"max_fence": 0, "commits": [], "deduplicated": [], "fenced_out": []}
        return data

    def commit(self, job_id: str, fence: int, attempt: int, what: str) -> str:
        """Do the effect of `job_id` under `fence`; returns what happened (see module doc)."""
        path = self._file(job_id)
        with self._locked(job_id):
            rec = self._read(path)
            note = {"fence": fence, "attempt": attempt, "pid": os.getpid(), "at": time.time()}
            if fence < rec["max_fence"]:
                outcome = FENCED_OUT
                rec["fenced_out"].append(note)
            elif rec["commits"]:
                outcome = DEDUPLICATED
                rec["deduplicated"].append(note)
            else:
                outcome = COMMITTED
                rec["commits"].append({**note, "what": what})
            rec["max_fence"] = max(rec["max_fence"], fence)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
            with open(fd, "w", encoding="utf-8") as fh:
                json.dump(rec, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            return outcome

    def committed(self, job_id: str) -> bool:
        return bool(self._read(self._file(job_id))["commits"])

    def all(self) -> dict[str, dict[str, Any]]:
        """job id -> its ledger record, for every job that tried an effect."""
        return {p.stem: self._read(p) for p in sorted(self.root.glob("*.json"))}
