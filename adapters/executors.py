"""Thread and process executors (the `fsm.ports.Executor` port).

Both keep a fixed number of slots (the worker's concurrency), enforce each
attempt's timeout, forward cancel tokens, and can be restarted in place: a
restart starts a new generation, and whatever the old generation reports late is
dropped, because every settlement looks its token up in the current generation.

- ThreadExecutor runs handlers on threads of this process. A thread cannot be
  killed: at its timeout (or a hard cancel) the attempt's cancel token is set, and
  if it does not stop within `stop_grace` it is *abandoned*: the worker stops
  renewing its lease and leaves it to recovery, and its late result is dropped.
- ProcessExecutor runs each slot in a long-lived child process (spawned, never
  forked from a threaded parent). Work and results cross the pipe as JSON text:
  the handler is imported by name in the child, never pickled. A handler's
  `ctx.mark` is a message `{"op": "mark", ...}` up the same pipe: the parent stores
  it (on a thread of its own) and replies, and the handler waits for the reply before
  it calls out. A child that dies
  (signal, `os._exit`, OOM kill) fails its attempt with the reason and is
  replaced; a timeout or a hard cancel kills the child with SIGKILL. A handler's
  `ctx.progress(...)` crosses the same pipe as JSON, rate-bounded (`adapters.child_pipe`),
  and reaches the parent's `Attempt.progress`: a killed child's last progress stays.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from fsm.errors import HookFailed
from fsm.handling.child import mark_reply
from fsm.ports import Attempt, ExecutorFull, Outcome

from .child_env import child_allow_list
from .child_pipe import INIT_FAILED_PREFIX, PROGRESS_PREFIX, READY, child_main, deliver_progress
from .in_flight import Done, Generations, InFlight, Slots, settle

log = logging.getLogger(__name__)

#: How often the watchdog of either executor looks at timeouts.
TICK = 0.05
#: Seconds a timed-out or hard-cancelled thread gets to stop before it is abandoned.
DEFAULT_STOP_GRACE = 1.0
#: Seconds a child may take to start and run the worker's `child_init` before the
#: executor gives up on it (the worker then stops, naming the hook).
DEFAULT_INIT_TIMEOUT = 120.0

# --- threads -----------------------------------------------------------------------------


class ThreadExecutor(Generations):
    """Runs attempts on threads; bounded by `slots`; cannot kill, so it abandons."""

    def __init__(self, slots: int | None = None, *, stop_grace: float = DEFAULT_STOP_GRACE) -> None:
        self._lock = threading.Lock()
        self._slots_n = slots or 1
        self._gen = Slots(0)
        self.stop_grace = stop_grace
        self._abandoned_alive = 0
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._tasks: queue.SimpleQueue[tuple[Slots, int, InFlight] | None] = queue.SimpleQueue()
        self._serving = 0

    def _spawn(self) -> None:
        """One more long-lived thread serving attempts (call with the lock held)."""
        self._serving += 1
        threading.Thread(
            target=self._serve, name=f"jobfsm-thread-{self._serving}", daemon=True
        ).start()

    def _serve(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            gen, token, record = item
            self._run(gen, token, record)
            if record.abandoned:
                return  # a replacement took this thread's place

    def start(self, slots: int) -> None:
        self._slots_n = slots
        with self._lock:
            for _ in range(slots):
                self._spawn()
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, name="jobfsm-thread-watchdog", daemon=True
            )
            self._watchdog.start()

    @property
    def generation(self) -> int:
        return self._gen.number

    @property
    def free(self) -> int:
        """Free slots; abandoned threads beyond one per slot eat into them (a bound)."""
        with self._lock:
            excess = max(0, self._abandoned_alive - self._slots_n)
            return max(0, self._slots_n - len(self._gen.records) - excess)

    def submit(self, attempt: Attempt, done: Done) -> None:
        if self.free <= 0:
            raise ExecutorFull(f"no free slot for job {attempt.job.id}")
        record = InFlight(attempt, done)
        with self._lock:
            gen = self._gen
            token = gen.add(record)
        self._tasks.put((gen, token, record))

    def _run(self, gen: Slots, token: int, record: InFlight) -> None:
        try:
            outcome = record.attempt.run()
        except BaseException as err:  # run_attempt catches Exception; this is the rest
            outcome = Outcome(status="failed", error=f"{type(err).__name__}: {err}")
        self._deliver(gen, token, record, outcome, stopped="handler stopped")

    def cancel(
        self,
        job_id: str,
        *,
        fence: int | None = None,
        hard: bool = False,
        reason: str = "cancelled",
    ) -> None:
        with self._lock:
            token = self._gen.find(job_id, fence)
            record = None if token is None else self._gen.records.get(token)
        if record is None:
            return
        record.attempt.cancelled.set()
        if hard:
            self._abandon(self._gen, token, f"{reason}; a thread cannot be killed")  # type: ignore[arg-type]

    def _abandon(self, gen: Slots, token: int, why: str) -> None:
        with self._lock:
            record = gen.pop(token) if gen is self._gen else None
            if record is None:
                return
            record.abandoned = True
            self._abandoned_alive += 1
            self._spawn()  # its thread is stuck: keep `slots` threads serving
        log.warning("job %s: attempt abandoned: %s", record.attempt.job.id, why)
        settle(record, Outcome(status="abandoned", error=why))

    def _watch(self) -> None:
        while not self._closed.wait(TICK):
            now = time.monotonic()
            with self._lock:
                gen = self._gen
                items = list(gen.records.items())
            for token, record in items:
                if record.stop_by is None and now >= record.deadline:
                    record.timed_out = True
                    record.stop_by = now + self.stop_grace
                    record.attempt.cancelled.set()
                elif record.stop_by is not None and now >= record.stop_by:
                    self._abandon(
                        gen,
                        token,
                        f"timed out after {record.attempt.timeout}s and did not stop "
                        f"within {self.stop_grace}s",
                    )

    def restart(self, reason: str) -> None:
        """New generation; attempts in flight are abandoned (their threads run on)."""
        with self._lock:
            old = self._gen
            self._gen = Slots(old.number + 1)
            records = list(old.records.values())
            old.records.clear()
            old.by_run.clear()
            for record in records:
                record.abandoned = True
                self._abandoned_alive += 1
                self._spawn()
        for record in records:
            record.attempt.cancelled.set()
            settle(record, Outcome(status="abandoned", error=f"executor restarted: {reason}"))

    def shutdown(self, wait: float) -> None:
        """Stop the serving threads once idle (threads still running are daemons)."""
        self._closed.set()
        with self._lock:
            serving, self._serving = self._serving, 0
        for _ in range(serving):
            self._tasks.put(None)


# --- processes ---------------------------------------------------------------------------


class _Child:
    __slots__ = ("cancel", "conn", "failed", "init_by", "process", "ready", "token")

    def __init__(
        self, ctx: SpawnContext, init: str | None, allow: tuple[str, ...], init_timeout: float
    ) -> None:
        parent_end, child_end = ctx.Pipe(duplex=True)
        self.cancel = ctx.Event()
        self.process: SpawnProcess = ctx.Process(
            target=child_main,
            args=(child_end, self.cancel, os.getpid(), init, allow),
            name="jobfsm-child",
            daemon=True,
        )
        self.process.start()
        child_end.close()
        self.conn = parent_end
        self.token: int | None = None
        #: it said READY: its child_init ran, it takes jobs
        self.ready = False
        #: why it cannot take jobs (its child_init failed, or it did not start in time)
        self.failed: str | None = None
        self.init_by = time.monotonic() + init_timeout


class ExecutorStartError(RuntimeError):
    """The process executor could not start its children."""


def _early(child: _Child) -> str:
    return f"{_death(child.process.exitcode)} before it was ready"


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "child process vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        return f"child process killed by signal {name}"
    return f"child process exited with status {exitcode}"


class _ProcGen(Slots):
    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.children: list[_Child] = []
        self.closed = threading.Event()
        self.monitor: threading.Thread | None = None
        #: every first child was ready: a child that fails from now on stops the worker
        self.started = False


class ProcessExecutor:
    """One long-lived spawned child per slot; kills on timeout; survives dead children.

    `child_env`: variable names (or shell patterns) a child keeps besides
    `adapters.child_env.DEFAULT_CHILD_ENV` and JOBFSM_CHILD_ENV's; every other variable of
    the worker's environment (its credentials) is removed in the child. `init_timeout`:
    seconds a child may take to start and run the worker's `child_init`."""

    def __init__(
        self,
        slots: int | None = None,
        *,
        child_env: Sequence[str] = (),
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
    ) -> None:
        if not init_timeout > 0:
            raise ValueError(f"init_timeout must be positive, got {init_timeout!r}")
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._slots_n = slots or 1
        self._gen = _ProcGen(0)
        self._started = False
        self.allow = child_allow_list(child_env)
        self.init_timeout = init_timeout
        self._init: str | None = None
        self._on_fatal: Callable[[str], None] | None = None
        self._fatal_sent = False
        self._ready = threading.Condition(self._lock)

    def init_children(self, target: str, on_fatal: Callable[[str], None]) -> None:
        """Run `target` ("module:qualname") once in each child before its first job
        (`fsm.worker.hooks.InitsChildren`); call before `start`."""
        self._init = target
        self._on_fatal = on_fatal

    def start(self, slots: int) -> None:
        """Start `slots` children and wait until each is ready (HookFailed if one's
        `child_init` fails or a child is not ready within `init_timeout`)."""
        self._slots_n = slots
        self._gen = self._new_gen(self._gen.number + (1 if self._started else 0))
        self._started = True

    def _spawn_child(self) -> _Child:
        return _Child(self._ctx, self._init, self.allow, self.init_timeout)

    def _new_gen(self, number: int, *, wait: bool = True) -> _ProcGen:
        """Start a generation's children; with `wait`, wait at most `init_timeout` until
        each is ready (HookFailed naming child_init, or ExecutorStartError, if one never
        is). Without, they become free as they get ready, and one that fails its
        child_init stops the worker (`init_children`'s `on_fatal`)."""
        gen = _ProcGen(number)
        gen.started = not wait
        gen.children = [self._spawn_child() for _ in range(self._slots_n)]
        gen.monitor = threading.Thread(
            target=self._monitor, args=(gen,), name=f"jobfsm-procs-{number}", daemon=True
        )
        gen.monitor.start()
        if not wait:
            return gen
        give_up = time.monotonic() + self.init_timeout
        failed: str | None = None
        with self._lock:
            while failed is None and not all(c.ready for c in gen.children):
                failed = next((c.failed for c in gen.children if c.failed), None)
                if failed is None and time.monotonic() >= give_up:
                    failed = f"children not ready within {self.init_timeout:g}s"
                self._ready.wait(TICK)
            gen.started = failed is None
        if failed is not None:
            self._close(gen, 1.0)
            if self._init is not None:
                raise HookFailed("child_init", self._init, failed)
            raise ExecutorStartError(f"process executor: a child could not start: {failed}")
        return gen

    def _child_failed(self, gen: _ProcGen, child: _Child, why: str) -> None:
        """A child that will never be ready (its child_init failed, it died first or took
        too long): at start `_new_gen` raises; later the worker is told to stop."""
        with self._lock:
            first = child.failed is None
            child.failed = why
            self._ready.notify_all()
            later = gen.started and not gen.closed.is_set()
        with contextlib.suppress(Exception):
            child.process.kill()
        if first:
            log.error("process executor: a child is not ready and is not replaced: %s", why)
        if first and later and self._on_fatal is not None and not self._fatal_sent:
            self._fatal_sent = True  # once: the worker stops on the first
            self._on_fatal(why)

    @property
    def generation(self) -> int:
        return self._gen.number

    @property
    def free(self) -> int:
        with self._lock:
            gen = self._gen
            return sum(
                1 for c in gen.children if c.ready and c.token is None and c.process.is_alive()
            )

    def children(self) -> list[int]:
        """Pids of the current generation's children (for tests and operators)."""
        with self._lock:
            return [c.process.pid or 0 for c in self._gen.children]

    def submit(self, attempt: Attempt, done: Done) -> None:
        record = InFlight(attempt, done)
        with self._lock:
            gen = self._gen
            child = next(
                (c for c in gen.children if c.ready and c.token is None and c.process.is_alive()),
                None,
            )
            if child is None:
                raise ExecutorFull(f"no free child process for job {attempt.job.id}")
            token = gen.add(record)
            child.token = token
            child.cancel.clear()
        task = json.dumps(
            {
                "target": attempt.target,
                "job_json": attempt.job_json,
                "result_limit": attempt.result_limit,
                "job_id": attempt.job.id,
                "fence": attempt.job.fence,
            }
        )
        try:
            child.conn.send_bytes(task.encode("utf-8"))
        except OSError as err:
            self._kill(gen, token, "crashed", f"could not hand the job to its child: {err}")

    def _kill(self, gen: _ProcGen, token: int, status: str, reason: str) -> None:
        with self._lock:
            record = gen.records.get(token)
            child = next((c for c in gen.children if c.token == token), None)
            if record is None or child is None or record.kill is not None:
                return
            record.kill = (status, reason)
        log.warning("job %s: killing its child process: %s", record.attempt.job.id, reason)
        with contextlib.suppress(Exception):
            child.process.kill()

    def cancel(
        self,
        job_id: str,
        *,
        fence: int | None = None,
        hard: bool = False,
        reason: str = "cancelled",
    ) -> None:
        with self._lock:
            gen = self._gen
            token = gen.find(job_id, fence)
            child = next((c for c in gen.children if token is not None and c.token == token), None)
        if token is None or child is None:
            return
        child.cancel.set()
        if hard:
            self._kill(gen, token, "killed", reason)

    def _finish(self, gen: _ProcGen, child: _Child, outcome: Outcome | None) -> None:
        """Settle the child's attempt (`outcome`, else how the child died)."""
        with self._lock:
            token, child.token = child.token, None
            record = None if token is None else gen.pop(token)
            current = gen is self._gen
        if record is None or not current:
            return
        if outcome is None:  # no result: we killed it, or it died on its own
            status, reason = record.kill or ("crashed", _death(child.process.exitcode))
            outcome = Outcome(status=status, error=reason)
        settle(record, outcome)

    def _monitor(self, gen: _ProcGen) -> None:
        while not gen.closed.is_set():
            with self._lock:
                children = list(gen.children)
            waitables: list[Any] = [
                c.conn for c in children if c.token is not None or not (c.ready or c.failed)
            ]
            waitables += [c.process.sentinel for c in children if not c.failed]
            try:
                ready = set(multiprocessing.connection.wait(waitables, timeout=TICK))
            except OSError:
                ready = set()
            for child in children:
                if child.conn in ready:
                    self._read(gen, child)
            for i, child in enumerate(children):
                if child.process.sentinel in ready and not gen.closed.is_set():
                    # what it sent before it died: progress (kept), perhaps its outcome
                    while child.token is not None and child.conn.poll() and self._read(gen, child):
                        pass
                    while not (child.ready or child.failed) and child.conn.poll():
                        if not self._read(gen, child):
                            break
                    child.process.join(timeout=1.0)  # reap it, so its exit status is known
                    if child.token is not None:
                        self._finish(gen, child, None)
                    with contextlib.suppress(Exception):
                        child.conn.close()
                    if not child.ready and (self._init is not None or not gen.started):
                        # never replaced: a replacement would fail the same way, forever
                        self._child_failed(gen, child, child.failed or _early(child))
                        continue
                    try:
                        fresh = self._spawn_child()
                    except Exception:
                        log.exception("could not start a replacement child process")
                        gen.closed.wait(1.0)
                        continue
                    with self._lock:
                        gen.children[i] = fresh
            now = time.monotonic()
            for child in children:
                if not (child.ready or child.failed) and now >= child.init_by:
                    self._child_failed(
                        gen, child, f"child not ready within {self.init_timeout:g}s; killed"
                    )
            with self._lock:
                late = [t for t, r in gen.records.items() if r.kill is None and now >= r.deadline]
            for token in late:
                record = gen.records.get(token)
                if record is not None:
                    self._kill(
                        gen,
                        token,
                        "timeout",
                        f"attempt timed out after {record.attempt.timeout}s; child killed",
                    )

    def _read(self, gen: _ProcGen, child: _Child) -> bool:
        """Take one message of the child; False when its pipe is closed."""
        try:
            text = child.conn.recv_bytes().decode("utf-8")
        except (EOFError, OSError):
            return False  # the sentinel tells how it died
        if text.startswith(PROGRESS_PREFIX):
            self._progress(gen, child, text)
            return True
        if text == READY:
            with self._lock:
                child.ready = True
                self._ready.notify_all()
            return True
        if text.startswith(INIT_FAILED_PREFIX):
            try:
                error = str(json.loads(text)["error"])
            except (ValueError, KeyError, TypeError):
                error = "bad message from the child"
            self._child_failed(gen, child, error)
            return True
        if text.startswith('{"op": "mark"'):
            self._mark(gen, child, text)
            return True
        try:
            outcome = Outcome.from_json(text)
        except ValueError as err:
            outcome = Outcome(status="failed", error=f"bad outcome from child: {err}")
        self._finish(gen, child, outcome)
        return True

    def _progress(self, gen: _ProcGen, child: _Child, text: str) -> None:
        """Hand a progress message to the attempt it belongs to (`Attempt.progress`)."""
        with self._lock:
            record = None if child.token is None else gen.records.get(child.token)
        if record is not None:
            deliver_progress(record.attempt, text)

    def _mark(self, gen: _ProcGen, child: _Child, text: str) -> None:
        """Store a child's mark (on a thread of its own: the store write must not hold up
        the monitor) and send the child the reply its handler is waiting for."""
        with self._lock:
            record = None if child.token is None else gen.records.get(child.token)
        marker = None if record is None else record.attempt.mark

        def store() -> None:
            err: BaseException | None = None
            try:
                message = json.loads(text)
                if marker is None:
                    raise RuntimeError("this attempt cannot record marks")
                marker(str(message["label"]), message.get("external_id"))
            except Exception as failure:  # the handler gets it and must not call outside
                err = failure
            with contextlib.suppress(OSError):
                child.conn.send_bytes(json.dumps(mark_reply(err)).encode("utf-8"))

        threading.Thread(target=store, name="jobfsm-mark", daemon=True).start()

    def restart(self, reason: str) -> None:
        """Kill the current children and start a new generation; old results are dropped."""
        with self._lock:
            old = self._gen
            records = list(old.records.values())
            old.records.clear()
            old.by_run.clear()
        old.closed.set()
        for child in old.children:
            with contextlib.suppress(Exception):
                child.process.kill()
        new = self._new_gen(old.number + 1, wait=False)  # free as each child gets ready
        with self._lock:
            self._gen = new
        for child in old.children:
            child.process.join(timeout=1.0)
        for record in records:
            settle(record, Outcome(status="killed", error=f"executor restarted: {reason}"))

    def shutdown(self, wait: float) -> None:
        self._close(self._gen, wait)

    @staticmethod
    def _close(gen: _ProcGen, wait: float) -> None:
        """Stop a generation's children: idle ones asked, the rest killed after `wait`."""
        gen.closed.set()
        for child in gen.children:
            if child.token is None:
                with contextlib.suppress(Exception):
                    child.conn.send_bytes(b'{"op":"stop"}')
        deadline = time.monotonic() + wait
        for child in gen.children:
            child.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if child.process.is_alive():
                child.process.kill()
                child.process.join(timeout=1.0)
            with contextlib.suppress(Exception):
                child.conn.close()
