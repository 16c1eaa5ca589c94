"""Hypothesis settings profiles, defined in one place; JOBFSM_PROFILE picks one.

- `dev`: quick local runs.
- `ci`: the size CI runs (seeded, reproducible, no deadline on slow stores).
- `thorough`: ten times CI, for users' nightly runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

#: `run_state_machine_as_test` under a typed name: hypothesis annotates it only in
#: recent releases, and this keeps strict mypy quiet on old and new alike.
run_machine: Callable[..., None] = run_state_machine_as_test

PROFILE_ENV = "JOBFSM_PROFILE"

_BASE = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)

settings.register_profile("dev", _BASE, max_examples=50, stateful_step_count=30)
settings.register_profile("ci", _BASE, max_examples=200, stateful_step_count=50, derandomize=True)
settings.register_profile("thorough", _BASE, max_examples=2000, stateful_step_count=100)


def load_profile(name: str | None = None) -> str:
    """Load `name`, else $JOBFSM_PROFILE, else `ci` under CI and `dev` elsewhere."""
    chosen = name or os.environ.get(PROFILE_ENV) or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(chosen)
    return chosen


def settings_of(name: str) -> settings:
    """The settings of the profile `name` (its example and step counts)."""
    return settings.get_profile(name)
