"""Small builders shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from fsm.records import Job, Owner
from fsm.service.identity import Identity
from fsm.testing.hosts import SimulatedProcesses

NOW = 1_000_000.0
OWNER = Owner(host="host-a", pid=4242, incarnation="inc-a")
OTHER = Owner(host="host-b", pid=777, incarnation="inc-b")


def job_in(state: str, **fields: Any) -> Job:
    """A job record in `state`, shaped as the lifecycle would leave it there."""
    base = Job(
        id="01TESTJOB0000000000000000",
        kind="email",
        queue="default",
        payload_json='{"to":"ada"}',
        state=state,
        created_at=NOW - 100,
        updated_at=NOW - 10,
        run_after=NOW - 10,
        correlation_id="corr-1",
        version=5,
    )
    if state in ("leased", "running", "cancelling"):
        base = attrs.evolve(base, owner=OWNER, lease_until=NOW + 30, fence=2)
    if state in ("running", "cancelling"):
        base = attrs.evolve(base, attempt=1, started_at=NOW - 5)
    if state in ("succeeded", "failed", "cancelled"):
        base = attrs.evolve(base, finished_at=NOW - 1, attempt=1, fence=2)
    if state == "investigate":
        base = attrs.evolve(base, attempt=1, fence=2, last_error="unknown outcome")
    return attrs.evolve(base, **fields)


def sweeper_on(host: str, *, gone: tuple[int, ...] = ()) -> Identity:
    """A sweeping process on simulated `host`, whose process table has the pids `gone`
    dead: the recovery sweep judges owners through this production `Identity`."""
    processes = SimulatedProcesses()
    for pid in gone:
        processes.kill(pid)
    return Identity(host, pid=1, processes=processes)


def token_free(dead: Owner) -> Callable[[Owner], str]:
    """A store liveness probe that finds `dead`'s token free and every other one held."""
    return lambda owner: "dead" if owner == dead else "alive"
