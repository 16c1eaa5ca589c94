"""A wrong RabbitMQ password: `jobfsm worker` exits 2 with one clear line naming the
broker (password hidden) and what to check, and no pika traceback or pika log record
(issue 37 item 9)."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

WRONG = "Wr0ngSecret9"


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = (parts.username or "guest").split(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def test_a_wrong_password_is_one_clear_line_without_a_traceback(
    rabbit_url: str, sqlite_url: str
) -> None:
    # given the broker's URL with a wrong password
    url = _with_password(rabbit_url, WRONG)
    # when a worker starts with it
    done = subprocess.run(
        [
            *(sys.executable, "-m", "fsm.cli", "worker"),
            *("--app", "tests.integration.worker.app:handlers"),
            *("--store", sqlite_url, "--delivery", url),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # then it stops at once with one line that says what to check
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unrecoverable RabbitMQ failure at amqp://"), last
    assert "(auth) ProbableAuthenticationError: the broker refused the login" in last
    assert "check the user and password of the AMQP URL" in last
    # and nothing else of pika's: no traceback, no record of its loggers, no password
    assert "Traceback" not in done.stderr
    assert " pika." not in done.stderr
    assert WRONG not in done.stdout + done.stderr
    refused = [line for line in done.stderr.splitlines() if "refused the login" in line]
    assert len(refused) <= 2  # the worker's log record and the command's error line
