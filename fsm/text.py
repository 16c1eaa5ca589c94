"""The one rule for text that jobfsm stores from outside: error texts and reasons.

Handler exceptions and broker or store errors can carry anything: megabytes of
traceback, NUL bytes (PostgreSQL text refuses them), lone surrogates (no UTF-8
encoding exists for them), terminal escape sequences. `clean_text` makes such
text safe to store, log and print, and is idempotent, so replaying an audit trail
gives the same text again.
"""

from __future__ import annotations

import re

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
