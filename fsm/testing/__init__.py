"""Public test helpers (extra jobfsm[testing]).

The store conformance suite and the hypothesis fault suites live here.
"""

from __future__ import annotations

from typing import Any

#: the fault suite's public names, imported on first use so that hypothesis
#: (extra jobfsm[testing]) is needed only by those who run it
_FAULTS = (
    "MODELS",
    "SIZES",
    "FaultReport",
    "FaultSuite",
    "KindSpec",
    "fault_machine",
    "fresh_databases",
    "fresh_stores",
    "run_faults",
    "run_models",
)

__all__ = list(_FAULTS)


def __getattr__(name: str) -> Any:
    if name in _FAULTS:
        from . import faults

        return getattr(faults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
