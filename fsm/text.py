"""Text from outside: the rule for what jobfsm stores (`clean_text`), and for what it
shows on a terminal or in a log line (`printable`, `first_line`).

Handler exceptions and broker or store errors can carry anything: megabytes of
traceback, NUL bytes (PostgreSQL text refuses them), lone surrogates (no UTF-8
encoding exists for them), terminal escape sequences. `clean_text` makes such
text safe to store, log and print, and is idempotent, so replaying an audit trail
gives the same text again.
"""

from __future__ import annotations

import re
import unicodedata

#: error text kept on a job and its audit entry (a traceback can be megabytes)
MAX_ERROR_CHARS = 4000
_CUT = " ...[truncated]"
#: control characters but tab and newline, DEL and the C1 controls
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def clean_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` with control characters and lone surrogates escaped, at most `limit` chars."""
    if not text.isprintable():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        text = _CONTROL.sub(_escape, text)
    if len(text) > limit:
        text = text[: limit - len(_CUT)] + _CUT
    return text


def printable(value: object, *, keep: str = "") -> str:
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
    line = printable(lines[0].strip())
    more = len(lines) > 1
    if len(line) > limit:
        line, more = line[: limit - 1], True
    return line + (" …" if more else "")
