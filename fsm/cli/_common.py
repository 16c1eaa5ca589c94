"""Helpers shared by the command modules: the store option, JSON output, records as dicts,
terminal tables (rich), escaping of stored text, logging set-up and option types."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import click

from .. import jsonio
from ..engine import Engine
from ..errors import BadInput, SchemaError
from ..progress import progress_of
from ..records import AuditEntry, Job
from ..registry import DEFAULT_STORE_URL, STORE_ENV, open_store, store_url
from ..secrets import redact_url

F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = (
    f"Store URL: memory://, sqlite:///path.db or postgresql://... "
    f"[default: ${STORE_ENV}, else {DEFAULT_STORE_URL}]"
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
#: widest a table is drawn when stdout is not a terminal (pipes, files, CI logs)
PIPE_WIDTH = 200


# --- options ---------------------------------------------------------------------------


def store_option(func: F) -> F:
    """`--store URL`; None means $JOBFSM_STORE, else the SQLite default."""
    return click.option("--store", "store", metavar="URL", default=None, help=STORE_HELP)(func)


def json_option(func: F) -> F:
    """`--json`: machine-readable output (one JSON document on stdout)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def _not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    return value


def actor_options(func: F) -> F:
    """`--actor NAME --reason TEXT`, both required and non-empty (recorded in the audit trail)."""
    func = click.option(
        "--reason",
        required=True,
        callback=_not_blank,
        help="Why (recorded in the audit trail; required, not empty).",
    )(func)
    return click.option(
        "--actor",
        required=True,
        callback=_not_blank,
        help="Who is acting (recorded in the audit trail; required, not empty).",
    )(func)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.3
    """A finite number of seconds: > 0 (or >= 0 with `zero_ok`). NaN, inf and negative
    values are usage errors naming the option; nothing is silently replaced by a default."""

    name = "seconds"

    def __init__(self, *, zero_ok: bool = False, minimum: float | None = None) -> None:
        self.zero_ok = zero_ok
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        if number < 0 or (number == 0 and not self.zero_ok):
            bound = "0 or more" if self.zero_ok else "more than 0"
            self.fail(f"{value!r} must be {bound} seconds", param, ctx)
        if self.minimum is not None and number < self.minimum:
            self.fail(f"{value!r} must be at least {self.minimum:g} seconds", param, ctx)
        return number


POSITIVE_SECONDS = Seconds()


def log_options(default_level: str = "INFO") -> Callable[[F], F]:
    """`--log-level` and `--log-format`, for the long-running commands."""

    def add(func: F) -> F:
        func = click.option(
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            default="text",
            show_default=True,
            help="text: one line per record; json: one JSON object per line with the "
            "structured fields (job_id, kind, event, fence, attempt, correlation_id, ...).",
        )(func)
        return click.option(
            "--log-level",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            default=default_level,
            show_default=True,
            help="Least severe log records shown (on stderr).",
        )(func)

    return add


# --- logging ---------------------------------------------------------------------------

# "vm:dd3cbe73-0ad2-...:4026531836/pid 12/ed549ea2" -> "vm:dd3cbe73/pid 12/ed549ea2"
_LONG_OWNER = re.compile(r"\b([A-Za-z][\w.-]*):([0-9a-f]{8})[0-9a-f-]*(?::\d+)?(/pid \d+/)")


def short_owners(text: str) -> str:
    """Owner ids shortened for people: the host id's first 8 hex digits are enough to tell
    workers apart in one log (the JSON format keeps the full id)."""
    return _LONG_OWNER.sub(r"\1:\2\3", text)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "jobfsm", None)
        if isinstance(fields, dict) and "kind" in fields:  # a transition: say what and where
            head, sep, rest = text.partition("\n")
            text = f"{head} [{fields['kind']} attempt {fields.get('attempt')} fence " + (
                f"{fields.get('fence')}]{sep}{rest}"
            )
        return clean(short_owners(text), keep="\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, pid and the structured fields
    the library attaches (`extra={"jobfsm": {...}}`, see fsm/observe.py)."""

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


#: transition events logged at DEBUG by the CLI (one per job, routine: the next line,
#: `start`, says the same job began)
QUIET_EVENTS = frozenset({"lease"})


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
    """Logging for a long-running command: stderr, `fmt` text or json; pika's INFO chatter
    (a line per connection step) stays out unless --log-level DEBUG."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_QuietRoutine(logging.getLevelName(level.upper())))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level.upper() != "DEBUG":
        logging.getLogger("pika").setLevel(logging.WARNING)


# --- stored text -----------------------------------------------------------------------


def clean(value: object, *, keep: str = "") -> str:
    """Stored text fit for a terminal: control and format characters (ANSI escapes, bidi
    overrides, lone surrogates, newlines unless kept) are shown as escapes (`\\x1b`),
    so stored data can never drive the terminal. Every command printing stored text uses it."""
    text = str(value)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch in keep or ch == " ":
            out.append(ch)
        elif unicodedata.category(ch) == "Zs":  # other spaces print as a space
            out.append(" ")
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


def first_line(text: str | None, limit: int = 80) -> str:
    """The first non-empty line of a (possibly multi-line) error, escaped and cut at `limit`;
    "…" marks what was left out (see `jobfsm inspect` for the whole text)."""
    if not text:
        return ""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = clean(lines[0].strip())
    more = len(lines) > 1
    if len(line) > limit:
        line, more = line[: limit - 1], True
    return line + (" …" if more else "")


def as_json_text(value: Any) -> str:
    """A payload or result as compact JSON (never a Python repr), escaped for the terminal."""
    return clean(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False))


def emit_json(value: Any) -> None:
    # ensure_ascii: control characters in stored text are written as \u escapes
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


# --- tables ----------------------------------------------------------------------------


def console(*, err: bool = False, width: int | None = None) -> Any:
    """A rich Console for stdout (or stderr): `width`, else the terminal's on a terminal,
    else PIPE_WIDTH; no markup or highlighting, so stored text is printed as it is
    (escaped)."""
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    if width is None and not stream.isatty():
        width = PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, markup=False, emoji=False)


class Bar:
    """What `progress_bar` yields: move it on, and print above it."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def update(self, completed: float, description: str | None = None) -> None:
        if description is None:
            self._progress.update(self._task, completed=completed)
        else:
            self._progress.update(self._task, completed=completed, description=description)

    def print(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)


@contextmanager
def progress_bar(description: str, total: float) -> Iterator[Bar]:
    """The one progress style of every long command (demo, faults, benchmarks): a rich
    bar with a count and the time elapsed, on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console(err=True)) as progress:
        yield Bar(progress, progress.add_task(description, total=total))


#: columns a narrow terminal may cut short (with "…"); ids, states and counts never are
SHRINKABLE = frozenset({"last error (first line)", "error", "reason", "actor", "fault"})
#: the widest a shrinkable column is drawn (first_line already cuts errors at 60)
SHRINK_TO = 64


def print_table(
    rows: Sequence[Sequence[object]], header: Sequence[str], *, title: str | None = None
) -> None:
    """A table of cells (escaped with `clean`, one line each) on stdout, drawn by rich."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = [[clean(c) for c in row] for row in rows]
    tbl = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False
    )
    needed = 0
    for i, name in enumerate(header):
        widest = max([len(name), *(len(r[i]) for r in cells)])
        if name in SHRINKABLE:  # at most SHRINK_TO wide, less on a narrow terminal
            width = min(widest, SHRINK_TO)
            tbl.add_column(name, no_wrap=True, overflow="ellipsis", max_width=width)
            needed += min(width, 20) + 3  # cell, padding, separator
        else:
            tbl.add_column(name, no_wrap=True, min_width=widest)
            needed += widest + 3
    for row in cells:
        tbl.add_row(*(Text(c, overflow="ellipsis", no_wrap=True) for c in row))
    out = console()
    if out.width < needed:  # too narrow: let the terminal wrap lines rather than hide columns
        out = console(width=needed)
    with out.capture() as captured:
        out.print(tbl)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


# --- records ---------------------------------------------------------------------------


def check_store_exists(url: str) -> None:
    """Read-only commands open existing stores only: a SQLite URL naming no file is an error
    (opening it would create and migrate an empty database, and a typo would read as "no
    jobs"). Other stores are servers: a wrong address fails to connect on its own."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite" or parts.netloc:
        return  # not SQLite, or a URL the adapter refuses with its own message
    # the adapter's rule (adapters/sqlite/url.py): the path after "sqlite:///", else jobfsm.db
    path = (parts.path[1:] if parts.path.startswith("/") else parts.path) or "jobfsm.db"
    if not os.path.exists(path):
        raise BadInput(
            f"no SQLite store at {clean(os.path.abspath(path))!r}: read-only commands do not "
            "create stores; check --store or $JOBFSM_STORE (`jobfsm migrate URL` creates one)"
        )


def _without_migration(url: str) -> str:
    """A PostgreSQL URL opened for reading: `migrate=false` unless the URL says otherwise,
    so a mistyped schema is refused instead of created (and nothing is migrated)."""
    parts = urlsplit(url)
    if parts.scheme.lower().split("+", 1)[0] not in ("postgresql", "postgres"):
        return url
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "migrate" for key, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("migrate", "false")])))


@contextmanager
def engine_for(url: str | None, *, existing: bool = False) -> Iterator[Engine]:
    """An Engine over the store `url` names (see `fsm.registry.store_url`), closed after.

    `existing=True` (read-only commands): refuse a store that does not exist yet (a SQLite
    path naming no file, a PostgreSQL schema not at this jobfsm's version); create and
    migrate nothing."""
    target = store_url(url)
    if existing:
        check_store_exists(target)
        try:
            store = open_store(_without_migration(target))
        except SchemaError as err:
            raise BadInput(
                f"{err} (read-only commands neither create nor migrate a store: check "
                "--store or $JOBFSM_STORE, or run `jobfsm migrate URL`)"
            ) from err
    else:
        store = open_store(target)
    try:
        yield Engine(store)
    finally:
        store.close()


def parse_json(text: str, what: str) -> Any:
    """JSON from the command line, or BadInput naming the option."""
    return jsonio.decode(text, what=what)


def job_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-able data (payload and result decoded)."""
    data = attrs.asdict(job, recurse=False)
    data["owner"] = None if job.owner is None else job.owner.to_dict()
    data["payload"] = job.payload
    data["result"] = job.result
    progress = progress_of(job)
    data["progress"] = None if progress is None else attrs.asdict(progress)
    del data["payload_json"], data["result_json"], data["progress_json"]
    return data


def entry_dict(entry: AuditEntry) -> dict[str, Any]:
    data = attrs.asdict(entry, recurse=False)
    data["data"] = entry.data
    del data["data_json"]
    return data


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def fmt_age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def redact(url: str) -> str:
    """A store URL fit to print: passwords masked (`fsm.secrets.redact_url`)."""
    return redact_url(url)
