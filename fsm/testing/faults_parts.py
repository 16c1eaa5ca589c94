"""A fault run cut into parts that run side by side (`jobfsm faults --jobs N`).

The main machine and each fault model are independent: each opens its own fresh
stores (a memory store, SQLite files, a PostgreSQL schema per run), so a run can hand
them to `N` processes and add up what they report. `split` shares the parts out by
their weight (their seconds in a default run on PostgreSQL, where the time goes:
longest first, each to the least loaded process); `merge` adds the processes'
reports into one, as one process would have written it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .faults import FaultReport

#: seconds of each part in a default run on PostgreSQL on a 2-core machine (three
#: processes, idle, 2026-12-07, docs/fault-suites.md); a part not named here weighs
#: DEFAULT_WEIGHT. Only the order they give matters, not the figures.
WEIGHTS: Mapping[str, float] = {
    "machine": 78.0,
    "crash": 22.0,
    "retention": 20.0,
    "concurrency": 19.0,
    "schedules": 18.0,
    "races": 18.0,
    "policy": 16.0,
    "limits": 14.0,
    "unique": 8.0,
    "commits": 8.0,
    "claims": 7.0,
    "verdicts": 7.0,
    "worker": 7.0,
    "transactions": 7.0,
    "reports": 6.0,
    "pauses": 6.0,
    "pool": 5.0,
    "payloads": 5.0,
    "waits": 4.0,
    "executor": 3.0,
}
DEFAULT_WEIGHT = 5.0


def split(parts: Sequence[str], processes: int) -> list[list[str]]:
    """`parts` shared out among at most `processes` groups, heaviest first, each to
    the lightest group so far; no group is empty, and each keeps the run's order."""
    if processes < 1:
        raise ValueError(f"a run needs at least one process, not {processes}")
    order = {name: i for i, name in enumerate(parts)}
    groups: list[list[str]] = [[] for _ in range(min(processes, len(parts)))]
    loads = [0.0] * len(groups)
    for name in sorted(parts, key=lambda n: (-WEIGHTS.get(n, DEFAULT_WEIGHT), order[n])):
        lightest = loads.index(min(loads))
        groups[lightest].append(name)
        loads[lightest] += WEIGHTS.get(name, DEFAULT_WEIGHT)
    return [sorted(group, key=order.__getitem__) for group in groups]


def report_of(data: Mapping[str, Any]) -> FaultReport:
    """A `FaultReport` from the JSON `jobfsm faults --json` wrote (`attrs.asdict`)."""
    return FaultReport(**{**data, "notes": tuple(data.get("notes", ()))})


def merge(reports: Sequence[FaultReport], seconds: float) -> FaultReport:
    """One report of the parts' `reports` (each ran to its end), over `seconds` of wall
    clock: counts added, every part's timings and notes, ok only if every part held."""
    if not reports:
        raise ValueError("no report to merge")
    first = reports[0]
    faults: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    coverage: dict[str, Counter[str]] = {}
    models: dict[str, float] = {}
    notes: list[str] = []
    for report in reports:
        faults.update(report.faults)
        checks.update(report.checks)
        for pair, counts in report.coverage.items():
            coverage.setdefault(pair, Counter()).update(counts)
        models.update(report.models)
        notes.extend(report.notes)
    failed = next((r for r in reports if not r.ok), None)
    return FaultReport(
        store_url=first.store_url,
        profile=first.profile,
        seed=first.seed,
        examples=sum(r.examples for r in reports),
        steps=sum(r.steps for r in reports),
        faults=dict(faults),
        checks=dict(checks),
        seconds=seconds,
        ok=failed is None,
        failure=None if failed is None else failed.failure,
        reproduction=None if failed is None else failed.reproduction,
        notes=tuple(dict.fromkeys(notes)),
        size=first.size,
        models=models,
        coverage={pair: dict(counts) for pair, counts in coverage.items()},
        failed_model=None if failed is None else failed.failed_model,
    )
