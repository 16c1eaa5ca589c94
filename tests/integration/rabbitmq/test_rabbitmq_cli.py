"""`jobfsm worker` and the RabbitMQ delivery: its options reach the broker, bad values are
usage errors naming the option, and a delivery that fails for good ends the process non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import pytest

from .helpers import rabbitmqctl, raw_channel, wait_until

APP = "tests.integration.worker.app:handlers"


def _worker_args(store: str, delivery: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fsm.cli",
        "worker",
        "--app",
        APP,
        "--store",
        store,
        "--delivery",
        delivery,
        *extra,
    ]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--rabbitmq-recovery-interval", "nan"), "recovery_interval"),
        (("--rabbitmq-recovery-interval", "-1"), "recovery_interval"),
        (("--rabbitmq-recovery-interval", "inf"), "recovery_interval"),
        (
            ("--rabbitmq-recovery-attempts", "-1"),
            "Invalid value for '--rabbitmq-recovery-attempts'",
        ),
        (("--rabbitmq-prefetch", "0"), "Invalid value for '--rabbitmq-prefetch'"),
        (("--rabbitmq-prefetch", "70000"), "Invalid value for '--rabbitmq-prefetch'"),
        (("--rabbitmq-queue-type", "stream"), "Invalid value for '--rabbitmq-queue-type'"),
        (("--rabbitmq-heartbeat", "0"), "Invalid value for '--rabbitmq-heartbeat'"),
        (("--rabbitmq-heartbeat", "70000"), "Invalid value for '--rabbitmq-heartbeat'"),
    ],
)
def test_a_bad_rabbitmq_option_is_a_usage_error_naming_it(
    extra: tuple[str, ...], named: str, rabbit_url: str, sqlite_url: str
) -> None:
    proc = _run(*_worker_args(sqlite_url, rabbit_url, *extra))
    assert proc.returncode == 2
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rabbitmq_options_without_a_rabbitmq_delivery_are_refused(sqlite_url: str) -> None:
    proc = _run(*_worker_args(sqlite_url, "poll", "--rabbitmq-prefetch", "3"))
    assert proc.returncode == 2
    assert "--rabbitmq-prefetch: only with a RabbitMQ delivery" in proc.stderr


def test_a_worker_pointed_at_a_non_amqp_port_exits_non_zero_at_once(sqlite_url: str) -> None:
    started = time.monotonic()
    proc = _run(*_worker_args(sqlite_url, "amqp://guest:guest@127.0.0.1:5432/%2F"))
    assert proc.returncode == 2
    assert "incompatible-protocol" in proc.stderr
    assert time.monotonic() - started < 30.0


def _queue_exists(rabbit_url: str, name: str) -> bool:
    conn, channel = raw_channel(rabbit_url)
    try:
        channel.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()
    return True


def test_rabbitmq_options_reach_the_broker(rabbit_url: str, tmp_path: Path) -> None:
    # given a worker started with a prefetch of 3 on a queue of its own
    queue = f"t{uuid.uuid4().hex[:10]}"
    had_dead_letters = _queue_exists(rabbit_url, "jobfsm.dead-letter")
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    worker = subprocess.Popen(
        _worker_args(
            f"sqlite:///{tmp_path / 'jobs.db'}",
            rabbit_url,
            "--queues",
            queue,
            "--rabbitmq-prefetch",
            "3",
            "--rabbitmq-recovery-attempts",
            "2",
            "--rabbitmq-recovery-interval",
            "5",
            "--rabbitmq-heartbeat",
            "7",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # when it consumes, then its consumer on the broker has prefetch 3
        def consumer_prefetch() -> bool:
            out = rabbitmqctl("list_consumers", "queue_name", "prefetch_count", "--quiet")
            return any(line.split() == [f"jobfsm.{queue}", "3"] for line in out.splitlines())

        wait_until(consumer_prefetch, 30, "the worker's consumer with prefetch 3")

        # and its connection has the heartbeat timeout 7 s
        def table(*args: str) -> list[list[str]]:
            # the broker is shared: rows of other tests' consumers, channels and
            # connections come too, and one that closes while it is listed may print a
            # row of another shape; only rows of the columns asked for are read
            rows = [line.split() for line in rabbitmqctl(*args, "--quiet").splitlines()[1:]]
            return [row for row in rows if len(row) == len(args) - 1]  # args: command, columns

        channels = {
            pid
            for name, pid in table("list_consumers", "queue_name", "channel_pid")
            if name == f"jobfsm.{queue}"
        }
        connections = {
            conn for pid, conn in table("list_channels", "pid", "connection") if pid in channels
        }
        timeouts = {
            t for pid, t in table("list_connections", "pid", "timeout") if pid in connections
        }
        assert timeouts == {"7"}
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
            conn, channel = raw_channel(rabbit_url)
            channel.queue_delete(f"jobfsm.{queue}")
            if not had_dead_letters:  # leave the broker as the test found it
                channel.queue_delete("jobfsm.dead-letter")
                channel.exchange_delete("jobfsm.dead-letter")
            conn.close()
    assert worker.returncode == 0
