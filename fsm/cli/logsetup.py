"""Logging of the long-running commands (worker, demo, faults): stderr, one line of
text or one JSON object per record, routine transitions kept for --log-level DEBUG."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from ..display.format import short_owners
from ..text import printable

#: transition events logged at DEBUG by the CLI (one per job, routine: the next line,
#: `start`, says the same job began)
QUIET_EVENTS = frozenset({"lease"})
#: what starts every line of a text record after its first (a traceback's lines)
CONTINUED = "    "


class TextFormatter(logging.Formatter):
    """One record, one line: the message (error texts of handlers, reconcilers, brokers
    included) has every control character escaped, newlines too, and a traceback's lines
    follow indented, so no text a job or a peer chose can start a line that reads as a
    record of its own."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        head, _, rest = super().format(record).partition("\n")
        fields = getattr(record, "jobfsm", None)
        if isinstance(fields, dict) and "kind" in fields:  # a transition: say what and where
            attempt, fence = fields.get("attempt"), fields.get("fence")
            head += f" [{fields['kind']} attempt {attempt} fence {fence}]"
        lines = [printable(short_owners(head))]
        lines += [CONTINUED + printable(line) for line in rest.splitlines()]
        return "\n".join(lines)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, pid and the structured fields
    the library attaches (`extra={"jobfsm": {...}}`, see fsm/telemetry/metrics.py)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        fields = getattr(record, "jobfsm", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                data.setdefault(key, value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class _QuietRoutine(logging.Filter):
    """Routine transitions (QUIET_EVENTS) become DEBUG records: shown only at DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "jobfsm", None)
        if (
            isinstance(fields, dict)
            and fields.get("event") in QUIET_EVENTS
            and fields.get("outcome") == "applied"
            and record.levelno == logging.INFO
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.level <= logging.DEBUG
        return True


def setup_logging(level: str, fmt: str) -> None:
    """Logging for a long-running command: stderr, `fmt` text or json; pika's records (a
    line per connection step, a traceback per failure jobfsm reports itself) stay out
    unless --log-level DEBUG."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_QuietRoutine(logging.getLevelName(level.upper())))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level.upper() != "DEBUG":
        # jobfsm classifies every pika failure it meets and logs it in one line; pika's
        # own records of the same failure (with tracebacks) are for --log-level DEBUG
        logging.getLogger("pika").setLevel(logging.CRITICAL)
