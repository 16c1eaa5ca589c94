"""`jobfsm worker`: bad --app references are refused with an error naming them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fsm.cli.worker_cmd import load_app
from fsm.errors import BadInput


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon_here", "must look like 'package.module:handlers'"),
        ("no.such.module:handlers", "cannot import 'no.such.module'"),
        ("tests.integration.worker.app:nothing", "has no 'nothing'"),
        ("tests.integration.worker.app:mark", "is not a mapping"),
    ],
)
def test_a_bad_app_reference_is_refused_naming_it(ref: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        load_app(ref)


def test_an_app_reference_to_a_handlers_registry_loads_it() -> None:
    handlers = load_app("tests.integration.worker.app:handlers")

    assert {"noop", "sleep", "effect"} <= set(handlers)


def test_the_command_line_reports_a_bad_app_in_one_line_and_exits_2(tmp_path: object) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fsm.cli", "worker", "--app", "nope", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode == 2
    assert "--app must look like" in proc.stderr
    assert "Traceback" not in proc.stderr
