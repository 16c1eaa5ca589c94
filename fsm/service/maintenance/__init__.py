"""Maintenance: small services a worker runs on a timer, each in a module of its own.

Each service has a `name` and `run_once(limit) -> Report`: one bounded pass (at most
`limit` jobs looked at per step), every write a compare-and-set on the version it
read, so any number of workers may run the same services at once. Read in this
order:

- `rescue`: leases that lapsed, and the jobs of owners judged DEAD (`Rescuer`);
- `lost_runs`: reconcilers asked what a lost run did, and reconciling jobs whose
  next check is due (`LostRuns`);
- `deadlines`: jobs whose deadline passed are failed (`Deadlines`);
- `release`: the backstop of dependency releases (`ReleaseSweep`);
- `ticks`: the due ticks of schedules (`Ticks`);
- `retention`: finished jobs past their retention are pruned (`Retention`).

`recovery_services` builds the recovery list in the order above; the worker's
sweeper runs that list every `recovery.sweep_interval`, `jobfsm recover` runs it
once (`sweep`), and the fault suite drives the same list. The worker's scheduler
runs `Ticks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..identity import Identity, Probe
from ..kernel import KernelSource
from ..reconcile import Asker, Reconciler
from .deadlines import Deadlines
from .lost_runs import LostRuns
from .release import ReleaseSweep
from .report import Deferred, Report
from .rescue import Rescuer

#: most jobs one step of a pass looks at
SWEEP_LIMIT = 1000

#: the name `jobfsm` gave maintenance reports before they had one type
RecoveryReport = Report


class Service(Protocol):
    """One maintenance duty: a bounded pass, and what it did."""

    name: str

    def run_once(self, limit: int = SWEEP_LIMIT) -> Report: ...


def recovery_services(
    source: KernelSource,
    identity: Identity | None = None,
    probe: Probe | None = None,
    *,
    reconcilers: Mapping[str, Reconciler] | None = None,
    asker: Asker | None = None,
) -> list[Service]:
    """The recovery list, in order. Without `identity` nobody judges owners and no
    reconciler is asked (a reconcile claim needs this process's identity as its owner)."""
    lost_runs = None
    if identity is not None and reconcilers:
        lost_runs = LostRuns(source, reconcilers, identity, asker)
    services: list[Service] = [Rescuer(source, identity, probe, lost_runs=lost_runs)]
    if lost_runs is not None:
        services.append(lost_runs)
    services += [Deadlines(source), ReleaseSweep(source)]
    return services


def run(services: Sequence[Service], limit: int = SWEEP_LIMIT) -> Report:
    """One pass of each service, in order; the sum of their reports."""
    report = Report()
    for service in services:
        report += service.run_once(limit)
    return report


def sweep(
    source: KernelSource,
    identity: Identity | None = None,
    probe: Probe | None = None,
    *,
    limit: int | None = None,
    reconcilers: Mapping[str, Reconciler] | None = None,
    asker: Asker | None = None,
) -> Report:
    """One recovery sweep: `recovery_services` built and run once. With an `asker`,
    reconcilers are asked in the background (`fsm.service.reconcile.Asker`)."""
    services = recovery_services(source, identity, probe, reconcilers=reconcilers, asker=asker)
    return run(services, SWEEP_LIMIT if limit is None else limit)


__all__ = [
    "SWEEP_LIMIT",
    "Deadlines",
    "Deferred",
    "LostRuns",
    "RecoveryReport",
    "ReleaseSweep",
    "Report",
    "Rescuer",
    "Service",
    "recovery_services",
    "run",
    "sweep",
]
