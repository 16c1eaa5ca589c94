"""The RabbitMQ tests without broker names of their own run on one xdist worker, one at a
time (tests/conftest.py); those with names of their own run anywhere.

A tiny suite runs under this repository's conftest on two workers with `--dist loadgroup`:
tests that need RabbitMQ (by marker or by the `rabbit_url` fixture) log when they start
and end, and every line must come from one worker, each test ending before the next
starts; tests that also ask for a `prefix` are not in the group. Under pytest 9.2 and
pytest-xdist 3.8 this fails without `LoadGroupShim`: the grouped tests are spread over
both workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["GROUP_LOG"])


def note(what):
    with LOG.open("a") as log:
        log.write(f"{what} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.fixture
def rabbit_url():
    return "amqp://not-used"


@pytest.mark.rabbitmq
@pytest.mark.parametrize("n", range(4))
def test_marked(n):
    note(f"start marked{n}")
    note(f"end marked{n}")


@pytest.mark.parametrize("n", range(4))
def test_by_fixture(n, rabbit_url):
    note(f"start fixture{n}")
    note(f"end fixture{n}")


@pytest.fixture
def prefix():
    return "own."


@pytest.mark.rabbitmq
@pytest.mark.parametrize("n", range(4))
def test_own_names(n, prefix):
    pass


@pytest.mark.parametrize("n", range(8))
def test_free(n):
    pass
"""


# slow: starts a pytest session with two xdist workers (three interpreters)
@pytest.mark.slow
def test_rabbitmq_tests_on_shared_names_run_on_one_worker_one_at_a_time(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # given a suite of RabbitMQ tests and free ones, under this repository's conftest
    log = tmp_path / "group.log"
    monkeypatch.setenv("GROUP_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makeini("[pytest]\nmarkers =\n    rabbitmq: x\n    services: x\n")
    pytester.makepyfile(test_grouped=SUITE)

    # when it runs on two workers, as the README's test command runs the suite
    result = pytester.runpytest_subprocess(
        "-p", "tests.conftest", "-n", "2", "--dist", "loadgroup", "-v"
    )

    # then all 20 pass, and the eight RabbitMQ tests without names of their own ran on one
    # worker, one after another
    result.assert_outcomes(passed=20)
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 16, lines
    assert len({worker for _, _, worker in lines}) == 1, lines
    starts, ends = lines[0::2], lines[1::2]
    assert all(
        s[0] == "start" and e[0] == "end" and s[1] == e[1]
        for s, e in zip(starts, ends, strict=True)
    )
    # and the controller saw the group (the suffix loadgroup schedules by)
    grouped = [line for line in result.stdout.lines if "PASSED" in line and "@rabbitmq" in line]
    assert len(grouped) == 8, result.stdout.lines
    # and the four with a `prefix` of their own were free to run anywhere
    own = [line for line in result.stdout.lines if "PASSED" in line and "test_own_names" in line]
    assert len(own) == 4, result.stdout.lines
    assert not [line for line in own if "@rabbitmq" in line], own
