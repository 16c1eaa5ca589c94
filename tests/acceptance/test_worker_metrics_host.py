"""`jobfsm worker --metrics-host`: the metrics endpoint binds the address asked for (a
scraper off the host, as Kubernetes scrapes the pod IP), 127.0.0.1 by default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.dashboard.handlers:handlers"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _argv(sqlite_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fsm.cli", "worker", "--app", APP, "--store", sqlite_url,
            "--no-scheduler", *extra]  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}


@contextmanager
def _worker(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=_env())
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _scrape(host: str, port: int, proc: subprocess.Popen[bytes], log: Path) -> str:
    """The endpoint's text, once it answers (the worker starts in a second or two)."""
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as resp:
                return str(resp.read().decode())
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_metrics_bind_the_address_given_and_only_it(sqlite_url: str, tmp_path: Path) -> None:
    # given a worker asked to serve metrics on 127.0.0.2 (a loopback address that is not
    # the default's: whether the option is honoured shows without another interface)
    port, log = _free_port(), tmp_path / "worker.log"
    argv = _argv(sqlite_url, "--metrics-host", "127.0.0.2", "--metrics-port", str(port))
    with _worker(argv, log) as proc:
        # then the endpoint answers there, and not on the default address
        assert "jobfsm_jobs" in _scrape("127.0.0.2", port, proc, log)
        assert _refused("127.0.0.1", port)


def test_metrics_on_every_interface_answer_on_a_non_loopback_address(
    sqlite_url: str, tmp_path: Path
) -> None:
    # given the host's own (non-loopback) address, as a scraper elsewhere reaches it
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is chosen
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    port, log = _free_port(), tmp_path / "worker.log"
    argv = _argv(sqlite_url, "--metrics-host", "0.0.0.0", "--metrics-port", str(port))
    with _worker(argv, log) as proc:
        assert "jobfsm_jobs" in _scrape(address, port, proc, log)


def test_metrics_bind_127_0_0_1_by_default(sqlite_url: str, tmp_path: Path) -> None:
    port, log = _free_port(), tmp_path / "worker.log"
    with _worker(_argv(sqlite_url, "--metrics-port", str(port)), log) as proc:
        assert "jobfsm_jobs" in _scrape("127.0.0.1", port, proc, log)
        assert _refused("127.0.0.2", port)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--metrics-host", "0.0.0.0"], "--metrics-host needs --metrics-port"),
        (["--metrics-host", "bad host!", "--metrics-port", "9"], "neither an IP address"),
        (["--metrics-host", "192.0.2.77", "--metrics-port", "9"], "cannot serve metrics on "
         "192.0.2.77:9"),
    ],
)  # fmt: skip
def test_a_metrics_host_that_cannot_be_served_is_refused_naming_it(
    sqlite_url: str, extra: list[str], message: str
) -> None:
    done = subprocess.run(
        _argv(sqlite_url, *extra), capture_output=True, text=True, timeout=60, check=False,
        cwd=ROOT, env=_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
