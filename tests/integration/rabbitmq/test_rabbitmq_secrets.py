"""A RabbitMQ password never appears in an error, a log record or a repr, whatever the URL
looks like: upper-case scheme, a `?password=` option, a mistyped percent-escape, a password
holding `/`, a refused login, an unreachable or unresolvable host, another service's port."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from adapters.memory import MemoryStore
from adapters.rabbitmq import DeliveryFailed, PublishFailed, RabbitDelivery
from fsm import Engine
from fsm.errors import BadInput

from .helpers import stored_job

SENTINEL = "S3ntinelPw9"
#: every form the sentinel could leak in
FORMS = (SENTINEL, quote(SENTINEL + "/@", safe=""), SENTINEL.lower())


def _assert_clean(text: str, where: str) -> None:
    for form in FORMS:
        assert form not in text, f"the password leaked in {where}: {text!r}"


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog
    _assert_clean(caplog.text, "the log")
    for record in caplog.records:
        _assert_clean(record.getMessage(), "a log record")


#: URLs refused when the delivery is built
REFUSED = [
    f"amqp://guest@127.0.0.1:5672/%2F?password={SENTINEL}",
    f"amqp://guest:{SENTINEL}%zz@127.0.0.1:5672/%2F",
    f"amqp://guest:{SENTINEL}%2@127.0.0.1:5672/%2F",
    f"amqp://guest:{SENTINEL}/x@127.0.0.1:5672/%2F",
    f"amqp://guest:{SENTINEL}@127.0.0.1:5672/%2F?heartbeat=often",
    f"amqp://guest:{SENTINEL}@127.0.0.1:5672/%2F?ssl_options={SENTINEL}",
    f"amqp://guest:{SENTINEL}@127.0.0.1:notaport/%2F",
    f"guest:{SENTINEL}@127.0.0.1:5672",
    f"ftp://guest:{SENTINEL}@127.0.0.1/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_a_refused_url_is_named_without_its_password(url: str, all_logs: object) -> None:
    with pytest.raises(BadInput) as caught:
        RabbitDelivery(url)
    _assert_clean(str(caught.value), "the error")
    _assert_clean(repr(caught.value), "the error's repr")
    assert "RabbitMQ url" in str(caught.value)
    assert caught.value.__cause__ is None  # no driver error chained with the raw URL


#: URLs accepted, whose connection then fails: (url, kind of failure, recovery attempts)
FAILING = [
    (f"AMQP://guest:{SENTINEL}@127.0.0.1:5672/%2F", "auth", 5),
    (f"amqp://guest:{quote(SENTINEL + '/@', safe='')}@127.0.0.1:5672/%2F", "auth", 5),
    (f"Amqp://guest:{SENTINEL}@127.0.0.1:1/%2F", "recovery is disabled", 0),
    (f"amqp://guest:{SENTINEL}@no-such-broker.invalid/%2F", "dns", 0),
    (f"amqp://guest:{SENTINEL}@127.0.0.1:5432/%2F", "incompatible-protocol", 5),
]


@pytest.mark.parametrize(("url", "kind", "attempts"), FAILING)
def test_connection_failures_and_reprs_never_show_the_password(
    url: str, kind: str, attempts: int, prefix: str, all_logs: object
) -> None:
    # given an accepted URL (the scheme is case-insensitive) whose connection fails
    engine = Engine(MemoryStore())
    delivery = RabbitDelivery(url, engine=engine, prefix=prefix, recovery_attempts=attempts)
    _assert_clean(repr(delivery.config), "the config's repr")
    _assert_clean(str(delivery.config), "the config's str")
    assert delivery.config.url.startswith("amqp://")
    try:
        # when it consumes and publishes
        with pytest.raises(DeliveryFailed) as consumed:
            delivery.start(["default"])
        with pytest.raises(PublishFailed) as published:
            delivery.publish([stored_job(engine)], wait=True)
    finally:
        delivery.close()
    # then every error names the failure, never the password
    assert kind in str(consumed.value)
    for err in (consumed.value, published.value):
        _assert_clean(str(err), "an error")
        _assert_clean(repr(err), "an error's repr")


def test_the_worker_command_accepts_an_upper_case_url_and_never_prints_its_password(
    sqlite_url: str,
) -> None:
    def worker(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "fsm.cli",
                "worker",
                "--app",
                "tests.integration.worker.app:handlers",
                "--store",
                sqlite_url,
                "--delivery",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    # an upper-case scheme reaches the broker (refused login), a wrong scheme is refused
    login = worker(f"AMQP://guest:{SENTINEL}@127.0.0.1:5672/%2F")
    scheme = worker(f"amqx://guest:{SENTINEL}@127.0.0.1:5672/%2F")
    assert login.returncode == 2
    assert "auth" in login.stderr
    assert scheme.returncode == 2
    assert "--delivery must be 'poll' or an amqp://" in scheme.stderr
    for proc in (login, scheme):
        _assert_clean(proc.stdout + proc.stderr, "the command's output")
