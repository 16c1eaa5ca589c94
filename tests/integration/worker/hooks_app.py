"""Handlers and set-up/clean-up hooks for the hook and child-environment tests.

Each hook leaves a marker file "<hook>.<pid>.<ns>" in $HOOKS_DIR (a name the tests add
to the children's allow-list), so a test sees from outside which process ran it and
how often. A file "fail-<hook>" in that folder makes the hook raise; a file
"fail-child_init-after" makes child_init raise in children started after it exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

from fsm.worker.context import Context
from fsm.worker.handlers import Handlers

handlers = Handlers()
#: set by child_init in the process that runs handlers
WARM: dict[str, Any] = {}


def _folder() -> Path:
    return Path(os.environ["HOOKS_DIR"])


def _ran(hook: str) -> None:
    folder = _folder()
    (folder / f"{hook}.{os.getpid()}.{time.monotonic_ns()}").touch()
    if (folder / f"fail-{hook}").exists():
        raise RuntimeError(f"{hook} cannot open its pool")


@handlers.worker_init
def open_pool() -> None:
    _ran("worker_init")


@handlers.worker_exit
def close_pool() -> None:
    _ran("worker_exit")


@handlers.child_init
def warm_model() -> None:
    _ran("child_init")
    if (_folder() / "fail-child_init-after").exists():
        raise RuntimeError("the model server is away")
    WARM["pid"] = os.getpid()


@handlers.handler("hooks.who")
def who(ctx: Context) -> dict[str, Any]:
    """Which process ran the job, and what its child_init left there."""
    return {"pid": os.getpid(), "warm": WARM.get("pid")}


@handlers.handler("hooks.crash", max_attempts=1)
def crash(ctx: Context) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


@handlers.handler("hooks.snoop")
def snoop(ctx: Context) -> dict[str, Any]:
    """A hostile handler: everything of the worker's environment it can find in its own."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    names = ctx.payload["names"]
    with open("/proc/self/environ", "rb") as f:
        startup = f.read().decode("utf-8", "replace")
    import posix

    return {
        "environ": dict(os.environ),
        "posix": {k.decode(): v.decode(errors="replace") for k, v in posix.environ.items()},
        "getenv": {n: (libc.getenv(n.encode()) or b"").decode() for n in names},
        "startup": startup,
    }
