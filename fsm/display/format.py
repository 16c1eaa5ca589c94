"""Values as people read them: times, ages, stored text made safe to show, first lines,
JSON cut to a size, owner ids shortened.

Plain functions over plain values, no I/O and no web or terminal library: the CLI, the
dashboard (as Jinja globals) and the demo all show a record's times and texts through
these, so a time or an age reads the same everywhere.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from ..records import AuditEntry
from ..text import first_line, printable

# "vm:dd3cbe73-0ad2-...:4026531836/pid 12/ed549ea2" -> "vm:dd3cbe73/pid 12/ed549ea2"
_LONG_OWNER = re.compile(r"\b([A-Za-z][\w.-]*):([0-9a-f]{8})[0-9a-f-]*(?::\d+)?(/pid \d+/)")


# "owner vm:dd3cbe73/pid 12/ed549ea2: pid 12 is gone on this host" (a judged owner's verdict)
_OWNER_FIRST = re.compile(r"^owner (\S+/pid \d+/[^\s:]+): (.+)$")


def fmt_time(ts: float | None) -> str:
    """A Unix time as UTC to the millisecond (`2026-01-02 03:04:05.678Z`); "-" for none."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def fmt_age(seconds: float) -> str:
    """A span of time in the unit that reads best: 4.2s, 3.5m, 2.0h, 1.5d (never negative)."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def as_json_text(value: Any) -> str:
    """A payload or result as compact JSON (never a Python repr), escaped for the terminal."""
    return printable(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False))


def capped(text: str | None, cap: int) -> tuple[str, bool]:
    """JSON text pretty-printed when it is small enough, cut to `cap` characters:
    (what to show, whether something was cut)."""
    if text is None:
        return "", False
    shown = text
    if len(text) <= cap:
        try:
            shown = json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
        except ValueError:
            shown = text
    return shown[:cap], len(shown) > cap


def short_owners(text: str) -> str:
    """Owner ids shortened for people: the host id's first 8 hex digits are enough to tell
    workers apart in one log (the JSON log format keeps the full id)."""
    return _LONG_OWNER.sub(r"\1:\2\3", text)


def error_summary(text: str | None, limit: int = 80) -> str:
    """An error's first line as a table cell: owner ids shortened and, for a judged
    owner's verdict ("owner X: why"), the why first and the owner after it, so a cut
    keeps the words that say what happened; cut at `limit` ("…", as `first_line`)."""
    line = first_line(text, 10_000)
    if not line:
        return ""
    more = line.endswith(" …")
    line = short_owners(line.removesuffix(" …"))
    if m := _OWNER_FIRST.match(line):
        line = f"{m.group(2)} (owner {m.group(1)})"
    if len(line) > limit:
        line, more = line[: limit - 1], True
    return line + (" …" if more else "")


def error_stage(last_error: str | None, entries: Sequence[AuditEntry]) -> str:
    """Where a job's `last_error` came from, as `inspect` and the dashboard's job page
    show it: "stage handler, attempt 2", from the newest failure entry among `entries`
    that recorded that error; "" when none of them did (or there is no error)."""
    if not last_error:
        return ""
    for entry in reversed(entries):
        if entry.stage and entry.error == last_error:
            return f"stage {entry.stage}, attempt {entry.attempt}"
    return ""
