"""Text a job, a handler or a reconciler chose cannot forge a line of the text logs."""

from __future__ import annotations

import logging
import re
import sys

import pytest

from fsm.cli.logsetup import CONTINUED, TextFormatter
from fsm.records import AuditEntry
from fsm.telemetry.observers import LogObserver
from tests.unit.helpers import NOW, job_in

FORGED = "2026-12-05 12:00:00,000 1 INFO fsm.transitions: job X succeed: running -> succeeded"
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError(f"boom\n{FORGED}")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("fsm.service", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_a_newline_in_a_logged_error_cannot_start_a_record_of_its_own() -> None:
    # given a reconciler whose exception text carries a newline and a fake transition
    record = _record("job %s: reconciler of %r failed: %s", "J", "k", f"raised X: a\n{FORGED}")

    # when the text format writes it
    text = TextFormatter().format(record)

    # then it is one line, the forged part escaped inside it
    assert "\n" not in text
    assert "a\\n2026-12-05" in text


def test_a_traceback_follows_indented_so_its_lines_read_as_continuations() -> None:
    text = TextFormatter().format(_record("handler failed", exc=True))

    first, *rest = text.split("\n")
    assert RECORD_START.match(first)
    assert rest
    assert all(line.startswith(CONTINUED) for line in rest)
    assert not any(RECORD_START.match(line) for line in rest)


@pytest.mark.parametrize("outcome", ["applied", "rejected"])
def test_the_log_observer_writes_only_an_errors_first_line(
    outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = job_in("running")
    entry = AuditEntry(
        job_id=job.id,
        version=6,
        at=NOW,
        event="fail",
        from_state="running",
        to_state="queued",
        fence=2,
        attempt=1,
        error=f"stale\n{FORGED}",
        outcome=outcome,
    )

    with caplog.at_level(logging.INFO, logger="fsm.transitions"):
        LogObserver().on_transition(job, entry)

    (record,) = caplog.records
    assert "\n" not in record.getMessage()
    assert FORGED not in record.getMessage()
    assert record.jobfsm["error"] == "stale …"  # type: ignore[attr-defined]
