"""`jobfsm faults --jobs N`: the run's parts in N child processes, side by side.

Each child is `jobfsm faults` itself with `--jobs 1`, the parent's options and the
`--model`s of its part (`fsm.testing.faults_parts.split`), writing its report with
`--json`. The parent waits for them, shows one bar per child, and adds their reports
into one (`merge`). The first child that fails ends the others and its own output is
passed through as it wrote it (the failing model, `FAILED: ...`, the reproduction).

A child ends with its parent: it asks the kernel for SIGTERM when the parent dies
(`PART_ENV` names the parent), and SIGTERM ends it through its `finally` blocks
(`sigterm_ends_run`, as it ends a run in one process), so that its PostgreSQL schema
is dropped even when the parent was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

from ..display.terminal import progress_bar

#: set in a child's environment to its parent's pid
PART_ENV = "JOBFSM_FAULTS_PARENT"
#: how long a child is given to drop what it made after SIGTERM, before SIGKILL
STOP_GRACE = 10.0
#: how long after a SIGTERM swallowed by a callback it is raised again (`_deliver_again`)
AGAIN_AFTER = 0.01
#: how many times the hook arms it again when it comes back before the hook returns
AGAIN_TRIES = 10
#: Linux prctl(2) option: the signal a process gets when its parent ends
_PR_SET_PDEATHSIG = 1


def serve_as_part() -> None:
    """In a child (`PART_ENV` set): end with the parent, and end cleanly on SIGTERM.
    Does nothing in a run that is not a part of another."""
    parent = os.environ.get(PART_ENV)
    if parent is None:
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if str(os.getppid()) != parent:  # the parent ended before the request took effect
        sys.exit(128 + signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while a run lasts (`sigterm_ends_run`). Not a
    `SystemExit`: hypothesis takes a `SystemExit` raised in an example for the
    example's failure, replays it and reports the run as failed, while it lets a
    `KeyboardInterrupt` through at once. A `KeyboardInterrupt` because psycopg treats
    one raised while it waits on the server as an interruption (it cancels the
    statement and raises it again), while any other `BaseException` raised as a
    pipeline ends is replaced by "cannot exit pipeline mode while busy", a store error:
    the example then failed and the run reported a failure, not SIGTERM."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def _deliver_again(previous: Any) -> Any:
    """A `sys.unraisablehook` that raises a swallowed `Terminated` again. Python runs a
    signal's handler between any two bytecodes of the main thread, so its exception
    may be raised inside a garbage collector's callback (hypothesis keeps one), a
    `__del__` or a weakref callback, where Python only prints "Exception ignored" and
    goes on: the run would last until SIGKILL (a child of a killed `--jobs` parent
    outlived it so, leaving its scratch files). The hook arms a one-shot SIGALRM
    (`AGAIN_AFTER` later, whose handler raises `Terminated` too) and returns, so it is
    raised again outside the callback; any other unraisable exception goes to
    `previous`. Should the alarm come while the hook still runs, the hook catches it
    and arms it once more, at most `AGAIN_TRIES` times (should it land in a callback
    again, it comes back here). No thread: a timer thread's start waits for the
    thread, and on a loaded machine the signal it sent came back inside the hook,
    where nothing caught it."""

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Terminated):
            previous(unraisable)
            return
        for _ in range(AGAIN_TRIES):
            try:
                signal.setitimer(signal.ITIMER_REAL, max(AGAIN_AFTER, 1e-6))
                return
            except Terminated:  # it came back while the hook still ran
                continue

    return hook


@contextlib.contextmanager
def sigterm_ends_run() -> Iterator[None]:
    """While the run in this process lasts, SIGTERM ends it through its `finally`
    blocks (which drop its PostgreSQL schema and remove its scratch files), then exits
    with status 143, in one process as in a child of `--jobs N`. The previous handler
    is restored after; off the main thread, where no handler can be set, nothing
    changes. A SIGTERM whose exception a callback swallowed is raised again
    (`_deliver_again`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    previous_alarm = signal.signal(signal.SIGALRM, _terminated)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _deliver_again(previous_hook)
    try:
        yield
    except Terminated:
        sys.exit(128 + signal.SIGTERM)
    finally:
        sys.unraisablehook = previous_hook
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        signal.signal(signal.SIGTERM, previous)


def run_parts(
    common: Sequence[str], groups: Sequence[Sequence[str]], json_out: str | None = None
) -> list[dict[str, Any]]:
    """Run one child per group of parts with the options `common`; their JSON reports,
    in the order of `groups`. Exits 1 (after ending the others) with the output of the
    first child that fails, and its report written to `json_out` (as a run in one
    process writes its report when it fails). A child's output and report go to unnamed
    temporary files (`tempfile.TemporaryFile`): nothing is left on disk, whatever ends
    the parent."""
    env = {**os.environ, PART_ENV: str(os.getpid())}
    children: list[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes], IO[bytes]]] = []
    with contextlib.ExitStack() as files:
        try:
            for group in groups:
                report, out, err = (files.enter_context(tempfile.TemporaryFile()) for _ in "ror")
                cmd = [sys.executable, "-m", "fsm.cli", "faults", *common, "--jobs", "1"]
                cmd += ["--json", f"/dev/fd/{report.fileno()}"]
                for name in group:
                    cmd += ["--model", name]
                child = subprocess.Popen(
                    cmd, stdout=out, stderr=err, env=env, pass_fds=(report.fileno(),)
                )
                children.append((child, report, out, err))
            _wait(children, groups, json_out)
            reports = []
            for _child, written, _out, _err in children:
                written.seek(0)
                reports.append(json.loads(written.read().decode("utf-8")))
            return reports
        finally:
            _stop([child for child, _, _, _ in children])


def _wait(
    children: Sequence[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes], IO[bytes]]],
    groups: Sequence[Sequence[str]],
    json_out: str | None,
) -> None:
    """Until every child ended; the first that fails ends the run (see `run_parts`)."""
    title = f"  {len(groups)} processes: " + " | ".join(", ".join(g) for g in groups)
    with progress_bar(title, len(children)) as bar:
        running = set(range(len(children)))
        while running:
            for i in sorted(running):
                child, report, out, err = children[i]
                code = child.poll()
                if code is None:
                    continue
                running.discard(i)
                bar.update(len(children) - len(running))
                if code != 0:
                    _stop([c for c, _, _, _ in children])
                    for file, stream in ((out, sys.stdout), (err, sys.stderr)):
                        file.seek(0)
                        stream.write(file.read().decode("utf-8", errors="replace"))
                    sys.stdout.flush()
                    sys.stderr.flush()
                    report.seek(0)
                    written = report.read()
                    if json_out and written:  # none when the child failed before its report
                        with open(json_out, "wb") as fh:
                            fh.write(written)
                    sys.exit(1 if code == 1 else 2)
            time.sleep(0.1)


def _stop(children: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every child still running, SIGKILL to any still there after
    `STOP_GRACE` seconds; each is waited for."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
