"""What every peer benchmark shares: worker processes and what RabbitMQ says about a queue.

Peer workers run from their own CLI as subprocesses, each in a session of its own so
that the process and the children it forks are killed together, always (`Workers` is
a context manager; leaving it kills them). `QueueProbe` reads a queue's `ready`
count and consumer count over AMQP (a passive `queue.declare`, milliseconds), and
`broker_counts` reads ready and unacknowledged counts from `rabbitmqctl list_queues`
(exact, but a call costs about 0.3 s: an Erlang VM starts each time).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import pika
import pika.exceptions

from benchmarks.harness import AMQP_URL, REPO, wait_for
from benchmarks.machine import CLOCK_TICKS, stat_fields

START_TIMEOUT = 90.0  # seconds for worker processes to come up under load


def group_cpu_seconds(groups: set[int]) -> float:
    """User + system CPU seconds of every live process in the process groups `groups`,
    and of the children they reaped (a pool's forks), from /proc."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(entry.name)
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) in groups:  # pgrp
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / CLOCK_TICKS


def drain_timeout(jobs: int) -> float:
    """How long `jobs` no-op jobs may take before the benchmark gives up (>= 20 jobs/s)."""
    return 60.0 + jobs / 20


def run_name(system: str) -> str:
    return f"bench_{system}_{uuid.uuid4().hex[:10]}"


class Workers:
    """Worker processes started from a peer's CLI; killed, with their children, on exit."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str], log: Path) -> None:
        self.argvs = argvs
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Workers:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            try:
                for argv in self.argvs:
                    self.procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", *argv],
                            cwd=REPO,
                            env=self.env,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,  # its own process group: killpg reaches forks
                        )
                    )
            except BaseException:
                self.stop()
                raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def cpu_seconds(self) -> float:
        """CPU seconds so far of every worker process and its forks (each is a group)."""
        return group_cpu_seconds({proc.pid for proc in self.procs})

    def check(self) -> None:
        """Raise (with the log's tail) if a worker process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"benchmark: worker {proc.args!r} exited with {proc.returncode}:\n{self.tail()}"
                )

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM each process group we started, SIGKILL what is left after 5 s."""
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            for proc in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)  # pgid == pid: start_new_session
            until = time.monotonic() + grace
            for proc in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, until - time.monotonic()))
            if all(_group_gone(proc.pid) for proc in self.procs):
                break
        self.procs = []


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class QueueProbe:
    """An AMQP connection that reads a queue's ready and consumer counts."""

    def __init__(self) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        self.channel = self.conn.channel()

    def counts(self, queue: str) -> tuple[int, int] | None:
        """(ready messages, consumers), or None while the queue does not exist."""
        try:
            ok: Any = self.channel.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as err:
            if err.reply_code != 404:
                raise
            self.channel = self.conn.channel()
            return None
        return int(ok.method.message_count), int(ok.method.consumer_count)

    def ready(self, queue: str) -> int:
        got = self.counts(queue)
        if got is None:
            raise RuntimeError(f"benchmark: queue {queue} vanished")
        return got[0]

    def wait_queued(self, queue: str, count: int) -> None:
        """Until `queue` holds `count` ready messages (no consumer): all publishes arrived."""
        wait_for(lambda: self.ready(queue) >= count, 60.0, f"{count} messages in {queue}", 0.001)
        if (got := self.ready(queue)) != count:
            raise RuntimeError(f"benchmark: {queue} holds {got} messages, expected {count}")

    def wait_consumers(self, queue: str, count: int, workers: Workers) -> None:
        def enough() -> bool:
            workers.check()
            got = self.counts(queue)
            return got is not None and got[1] >= count

        wait_for(enough, START_TIMEOUT, f"{count} consumers on {queue}", step=0.05)

    def purge(self, queue: str) -> None:
        self.channel.queue_purge(queue)

    def delete(self, *queues: str, exchanges: tuple[str, ...] = ()) -> None:
        for queue in queues:
            self.channel.queue_delete(queue)
        for exchange in exchanges:
            self.channel.exchange_delete(exchange)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


RABBITMQCTL = shutil.which("rabbitmqctl")


def broker_counts(queue: str) -> tuple[int, int]:
    """(ready, unacknowledged) for `queue`, read by `rabbitmqctl list_queues` from the broker."""
    if RABBITMQCTL is None:
        raise RuntimeError("benchmark: rabbitmqctl is not on PATH; cannot read unacked counts")
    argv = [RABBITMQCTL, "-q", "--no-table-headers", "list_queues", "name"]
    argv += ["messages_ready", "messages_unacknowledged"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == queue:
            return int(parts[1]), int(parts[2])
    raise RuntimeError(f"benchmark: rabbitmqctl does not list queue {queue}")


def wait_drained(
    probe: QueueProbe,
    queue: str,
    started: float,
    jobs: int,
    workers: Workers,
    *,
    at_ready: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Wait until `queue` holds nothing, ready or unacked; return two elapsed times.

    Called after the last publish has reached the queue (see `_barrier` in the peer
    modules: a passive queue.declare is no such barrier, RabbitMQ answers it ahead of
    deliveries still in the queue process's mailbox). The first time is when the
    queue's ready count reached 0 (passive queue.declare, polled every 2 ms): at that
    moment at most the consumers' total prefetch is still unacknowledged, so it is
    early by at most that many messages. The second is when `rabbitmqctl` first reports
    ready + unacked == 0 (the end of that call): late by at most one call (~0.3 s).
    The true end lies between the two. `at_ready` is called at the first, before
    any `rabbitmqctl` (an Erlang VM of its own) runs.
    """
    limit = drain_timeout(jobs)

    def no_ready() -> bool:
        workers.check()
        return probe.ready(queue) == 0

    wait_for(no_ready, limit, f"ready messages on {queue} to reach 0", step=0.002)
    ready_after = time.perf_counter() - started
    if at_ready is not None:
        at_ready()

    def empty() -> bool:
        workers.check()
        return sum(broker_counts(queue)) == 0

    wait_for(empty, limit, f"ready + unacked on {queue} to reach 0 (rabbitmqctl)", step=0.0)
    at_empty = time.perf_counter() - started
    return ready_after, at_empty
