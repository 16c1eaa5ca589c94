"""A process executor's child (`child_main`) and its pipe to the parent: outcomes, and
the progress a handler reports, relayed as JSON (`adapters.executors.ProcessExecutor`
owns both ends).

A child starts by removing the worker's credentials from its environment
(`adapters.child_env`), then runs the worker's `child_init` hook once, if there is
one, and tells the parent `{"op": "ready"}`, or `{"op": "init_failed", "error": ...}`
and exits: the parent hands it no job before it is ready.

A handler's `ctx.progress(...)` in a child becomes a message
`{"progress": <JSON text>, "job": id, "fence": n}` on the pipe its outcome takes (no
pickle). Messages of one child are at least PROGRESS_EVERY apart: between two, the
latest value wins, and the last one is sent before the outcome. The parent hands each
to the attempt it names (`fsm.ports.Attempt.progress`); a late one is dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from fsm.handling.child import MARK_OP, raise_mark_reply, run_child_init, run_target
from fsm.ports import Attempt, Outcome

from .child_env import scrub_environment

log = logging.getLogger(__name__)

#: Shortest time between two progress messages of one child; between them the latest
#: value wins, and the last one is sent before the outcome (a bound on the pipe).
PROGRESS_EVERY = 0.2
PROGRESS_PREFIX = '{"progress":'
#: The child's first message: ready for jobs (its `child_init` ran), or why not.
READY = '{"op": "ready"}'
INIT_FAILED_PREFIX = '{"op": "init_failed"'


class ChildOut:
    """A child's way back to its parent: outcomes, and progress messages
    `{"progress": <JSON text>, "job": id, "fence": n}` at most PROGRESS_EVERY apart.

    The handler's thread and a small flusher thread (which sends a value held back by
    the rate bound) share the pipe under one lock; an outcome goes out after the
    attempt's last progress, so the parent always has the handler's final value.
    """

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.pending: bytes | None = None
        self.sent_at = 0.0
        self.due = threading.Event()
        self.flusher: threading.Thread | None = None

    def progress_sender(self, job_id: str, fence: int) -> Callable[[str], None]:
        def send(text: str) -> None:
            message = json.dumps({"progress": text, "job": job_id, "fence": fence})
            with self.lock:
                self.pending = message.encode("utf-8")
                if time.monotonic() - self.sent_at >= PROGRESS_EVERY:
                    with contextlib.suppress(OSError):  # the parent is gone: so are we soon
                        self._send_pending()
                    return
                if self.flusher is None:
                    self.flusher = threading.Thread(target=self._flush, daemon=True)
                    self.flusher.start()
            self.due.set()

        return send

    def _send_pending(self) -> None:
        """Send the held-back progress, if any (call with the lock held)."""
        if self.pending is not None:
            message, self.pending = self.pending, None
            self.conn.send_bytes(message)
            self.sent_at = time.monotonic()

    def _flush(self) -> None:
        while True:
            self.due.wait()
            while True:  # send once PROGRESS_EVERY has passed since the last message
                with self.lock:
                    wait = self.sent_at + PROGRESS_EVERY - time.monotonic()
                    if wait <= 0:
                        self.due.clear()
                        with contextlib.suppress(OSError):
                            self._send_pending()
                        break
                time.sleep(wait)

    def outcome(self, outcome: Outcome) -> None:
        with self.lock:
            self._send_pending()
            self.conn.send_bytes(outcome.to_json().encode("utf-8"))


def deliver_progress(attempt: Attempt, text: str) -> None:
    """Give `attempt` the progress a message carries, if the message is its own."""
    try:
        message = json.loads(text)
        job_id, fence, value = message["job"], message["fence"], message["progress"]
    except (ValueError, KeyError, TypeError) as err:
        log.warning("bad progress message from a child dropped: %s", err)
        return
    if (job_id, fence) != (attempt.job.id, attempt.job.fence) or not isinstance(value, str):
        return  # a late message of an attempt that already ended
    if attempt.progress is not None:
        try:
            attempt.progress(value)
        except Exception:
            log.exception("job %s: progress callback failed", job_id)


# --- the child ---------------------------------------------------------------------------


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when its parent dies (no orphaned handlers)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_main(
    conn: multiprocessing.connection.Connection,
    cancel: Any,
    parent: int,
    init: str | None = None,
    allow: tuple[str, ...] = ("*",),
) -> None:
    """A slot's child: scrub the environment, run `init` once, then one JSON task at a
    time until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker drains; children follow it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    if os.getppid() != parent:
        return
    scrub_environment(allow)
    out = ChildOut(conn)
    error = None if init is None else run_child_init(init)
    try:
        if error is not None:
            conn.send_bytes(json.dumps({"op": "init_failed", "error": error}).encode("utf-8"))
            return
        conn.send_bytes(READY.encode("utf-8"))
    except OSError:
        return
    while True:
        try:
            text = conn.recv_bytes().decode("utf-8")
        except (EOFError, OSError):
            return
        task = json.loads(text)
        if task.get("op") == "stop":
            return
        sender = out.progress_sender(str(task.get("job_id")), int(task.get("fence", 0)))
        outcome = run_target(
            task["target"],
            task["job_json"],
            cancel,
            int(task["result_limit"]),
            sender,
            marker=child_marker(out, task["job_json"]),
        )
        try:
            out.outcome(outcome)
        except (BrokenPipeError, OSError):
            return


def child_marker(out: ChildOut, job_json: str) -> Callable[[str, str | None], None]:
    """`ctx.mark` in a child: the mark goes to the parent as JSON (under the pipe's
    lock: the progress flusher writes to it too), and the handler waits for the
    parent's reply (stored, or the error to raise) before it goes on."""
    from fsm.records import job_from_json

    job = job_from_json(job_json)

    def mark(label: str, external_id: str | None) -> None:
        message = {"op": MARK_OP, "label": label, "external_id": external_id}
        with out.lock:
            out.conn.send_bytes(json.dumps(message).encode("utf-8"))
        raise_mark_reply(job, json.loads(out.conn.recv_bytes().decode("utf-8")))

    return mark
