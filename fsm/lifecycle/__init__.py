"""The lifecycle core: the spec (specs/job.toml), its rules, `decide`, `replay` and the
invariant checks. Pure: no I/O, no clock, no randomness of its own.

Start reading here: `spec.py` loads and checks the table, `rules.py` holds the named
guards and effects the table refers to, `core.py` applies one event to one record,
and `invariants.py` checks a record and its audit trail against the spec.
"""

from __future__ import annotations

from .core import HEARTBEAT_FIELDS, decide, rejected_entry, replay, same_except_heartbeats
from .spec import Lifecycle, check_spec, lifecycle, load_spec

__all__ = [
    "HEARTBEAT_FIELDS",
    "Lifecycle",
    "check_spec",
    "decide",
    "lifecycle",
    "load_spec",
    "rejected_entry",
    "replay",
    "same_except_heartbeats",
]
