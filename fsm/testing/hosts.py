"""Simulated hosts for the fault suite: a process table and liveness tokens.

The recovery sweep judges owners with the production `fsm.service.identity.Identity.judge`.
In a simulation the processes are not real, so what the judge asks of the world
is answered here: which pids of a host are gone (`SimulatedProcesses`, the
`fsm.service.identity.ProcessTable` of one simulated host) and which liveness tokens are
held (`SimulatedLiveness`, the store's `probe`, which can be made to fail). The
judgement itself is the production code, so a change that breaks it (an UNKNOWN
read as DEAD, a failed probe taken for death) makes the fault suite fail.
"""

from __future__ import annotations

from ..records import Owner
from ..service.identity import Status, Verdict


class SimulatedProcesses:
    """One simulated host's process table: pids started, and pids that died."""

    def __init__(self) -> None:
        self.alive: set[int] = set()
        self.gone: set[int] = set()

    def start(self, pid: int) -> None:
        self.alive.add(pid)
        self.gone.discard(pid)

    def kill(self, pid: int) -> None:
        self.alive.discard(pid)
        self.gone.add(pid)

    def verdict(self, pid: int) -> Verdict:
        """As `fsm.service.identity.pid_verdict` answers for a real host: a gone pid is DEAD, a live
        one proves nothing (pids are reused), an unknown one proves nothing either."""
        if pid in self.gone:
            return Verdict(Status.DEAD, f"pid {pid} is gone on this host", "owner_dead_pid_gone")
        if pid in self.alive:
            return Verdict(Status.UNKNOWN, f"pid {pid} is alive (maybe reused); the lease decides")
        return Verdict(Status.UNKNOWN, f"pid {pid} could not be checked")


class ProbeFailed(ConnectionError):
    """The simulated store did not answer a liveness probe."""


class SimulatedLiveness:
    """Liveness tokens held by simulated processes; a probe can be made to fail once."""

    def __init__(self) -> None:
        self.held: set[Owner] = set()
        self.failures = 0
        self.probes = 0

    def hold(self, owner: Owner) -> None:
        self.held.add(owner)

    def release(self, owner: Owner) -> None:
        self.held.discard(owner)

    def fail_next(self, times: int = 1) -> None:
        self.failures += times

    def probe(self, owner: Owner) -> str:
        """'alive' while the owner's token is held, 'dead' once it is free."""
        self.probes += 1
        if self.failures:
            self.failures -= 1
            raise ProbeFailed("the store did not answer the liveness probe")
        return "alive" if owner in self.held else "dead"
