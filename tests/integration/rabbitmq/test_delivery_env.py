"""`jobfsm worker` takes its AMQP URL from $JOBFSM_DELIVERY as it takes the store's from
$JOBFSM_STORE, so a broker password need not be on the command line (issue 32 item 15)."""

from __future__ import annotations

import os
import subprocess
import sys

from fsm.cli.options import DELIVERY_ENV

SENTINEL = "EnvPassw0rdXyz"


def _worker(sqlite_url: str, delivery: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    env[DELIVERY_ENV] = delivery
    return subprocess.run(
        [
            *(sys.executable, "-m", "fsm.cli", "worker"),
            *("--app", "tests.integration.worker.app:handlers", "--store", sqlite_url),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_the_amqp_url_comes_from_the_environment(sqlite_url: str) -> None:
    # given the broker's URL (a wrong password, so the worker stops at the login) in the env
    done = _worker(sqlite_url, f"amqp://guest:{SENTINEL}@127.0.0.1:5672/%2F")

    # then the worker went to that broker, and the password is shown nowhere
    assert done.returncode == 2, done.stderr
    assert "the broker refused the login" in done.stderr
    assert SENTINEL not in done.stdout + done.stderr


def test_a_bad_value_in_the_environment_is_refused_naming_the_variable(sqlite_url: str) -> None:
    done = _worker(sqlite_url, f"amqx://guest:{SENTINEL}@127.0.0.1:5672/%2F")

    assert done.returncode == 2
    assert "--delivery must be 'poll' or an amqp://" in done.stderr
    assert f"${DELIVERY_ENV}" in done.stderr
    assert SENTINEL not in done.stdout + done.stderr


def test_the_option_wins_over_the_environment(sqlite_url: str) -> None:
    # given a bad value in the env, and --delivery given: the option is used
    done = _worker(sqlite_url, "amqx://bad", "--delivery", "poll", "--rabbitmq-prefetch", "4")

    assert done.returncode == 2
    assert "--rabbitmq-prefetch: only with a RabbitMQ delivery" in done.stderr
