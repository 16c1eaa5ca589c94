"""The Prometheus alerting rules shipped with jobfsm (`alerts.yml` in this package).

    python -m fsm.telemetry.alerts > jobfsm-alerts.yml

prints them; `rules_path()` is where the installed file is. docs/metrics.md,
"Alerting rules", explains each rule and its threshold.
"""

from __future__ import annotations

import sys
from importlib import resources
from importlib.abc import Traversable

RULES_FILE = "alerts.yml"


def rules_path() -> Traversable:
    """The installed rules file."""
    return resources.files(__package__ or "fsm.telemetry") / RULES_FILE


def rules_text() -> str:
    return rules_path().read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.stdout.write(rules_text())
