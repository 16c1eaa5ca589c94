"""Progress from a process executor's child to its parent, as JSON over the slot's pipe.

A handler's `ctx.progress(...)` in a child becomes a message
`{"progress": <JSON text>, "job": id, "fence": n}` on the pipe its outcome takes (no
pickle). Messages of one child are at least PROGRESS_EVERY apart: between two, the
latest value wins, and the last one is sent before the outcome. The parent hands each
to the attempt it names (`fsm.ports.Attempt.progress`); a late one is dropped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing.connection
import threading
import time
from collections.abc import Callable

from fsm.ports import Attempt, Outcome

log = logging.getLogger(__name__)

#: Shortest time between two progress messages of one child; between them the latest
#: value wins, and the last one is sent before the outcome (a bound on the pipe).
PROGRESS_EVERY = 0.2
PROGRESS_PREFIX = '{"progress":'


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
