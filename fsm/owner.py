"""Who owns a lease, and whether that owner is still alive.

An owner is (host identity, pid, incarnation). The host identity joins the host
name, the kernel boot id and the PID namespace, so two containers that share a
host name, or one host before and after a reboot, are never taken for each
other. The incarnation is random per process and is drawn again in a forked
child, whose registry of held leases starts empty: a child never believes it
holds its parent's leases.

`Identity.judge` gives a verdict on any owner, failing closed: UNKNOWN is never
read as dead, and only evidence (this process no longer holds the job, the pid
is gone on this host, the store's liveness token is free) yields DEAD.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import socket
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

import attrs

from .records import Owner

#: Test hook: replaces the host identity, so one machine can pose as another host.
#: Processes that share a value judge each other's pids as their own: never set it
#: in production (a fleet sharing one value would take live workers for dead ones).
HOST_ENV = "JOBFSM_HOST_ID"
_warned: set[str] = set()
log = logging.getLogger(__name__)

#: Most abandon reasons remembered for the sweep (oldest forgotten first).
MAX_ABANDONED = 10_000


def host_identity() -> str:
    """hostname:boot id:PID namespace inode, or $JOBFSM_HOST_ID when set."""
    override = os.environ.get(HOST_ENV)
    if override:
        if override not in _warned:
            _warned.add(override)
            log.warning(
                "%s=%r: this process poses as that host (a test hook). Processes sharing "
                "the value judge each other's pids as local ones: never set it in production",
                HOST_ENV,
                override,
            )
        return override
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = "no-boot-id"
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
        pidns = link.rsplit("[", 1)[-1].rstrip("]")
    except OSError:
        pidns = "no-pidns"
    return f"{socket.gethostname()}:{boot}:{pidns}"


class Status(enum.StrEnum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


@attrs.frozen
class Verdict:
    status: Status
    reason: str
    #: for a DEAD verdict, the reason code its expire entry carries (specs/job.toml [codes])
    code: str = "owner_dead"

    @property
    def dead(self) -> bool:
        return self.status is Status.DEAD


Probe = Callable[[Owner], str]


def _pid_state(pid: int) -> str | None:
    """The process state letter from /proc (Z for a zombie), None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # "pid (comm) S ..." where comm may hold spaces or parentheses.
    rest = text.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


def pid_verdict(pid: int) -> Verdict:
    """Liveness of a pid on this host (same PID namespace)."""
    if pid <= 0:
        return Verdict(Status.UNKNOWN, f"pid {pid} is not a process id")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return Verdict(Status.DEAD, f"pid {pid} is gone on this host", "owner_dead_pid_gone")
    except PermissionError:
        # It exists but is not ours to signal: never read as dead (fail closed).
        return Verdict(Status.UNKNOWN, f"pid {pid} exists (not signalable); the lease decides")
    except OSError as err:
        return Verdict(Status.UNKNOWN, f"pid {pid} could not be checked ({err})")
    if _pid_state(pid) in ("Z", "X"):
        return Verdict(
            Status.DEAD, f"pid {pid} has exited (zombie) on this host", "owner_dead_pid_gone"
        )
    return Verdict(
        Status.UNKNOWN, f"pid {pid} is alive on this host (maybe reused); the lease decides"
    )


class ProcessTable(Protocol):
    """What a host knows of its own processes: the verdict on one pid."""

    def verdict(self, pid: int) -> Verdict: ...


class LocalProcesses:
    """This host's process table, read through `kill(pid, 0)` and /proc."""

    def verdict(self, pid: int) -> Verdict:
        return pid_verdict(pid)


_identities: weakref.WeakSet[Identity] = weakref.WeakSet()

#: a run this process holds: (job id, fence). Two runs of one job (a late old one and
#: a new one) are two entries, so the end of the old run never forgets the new one.
RunKey = tuple[str, int]


class Identity:
    """This process as an owner, with the registry of the runs it holds.

    Thread-safe. After `fork` every Identity of the parent draws a new
    incarnation, takes the child's pid and forgets every held run.

    `host`, `pid` and `processes` are fixed only by simulations (the fault suite
    judges simulated workers with this same code over a simulated process table).
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        pid: int | None = None,
        processes: ProcessTable | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._fixed_host = host
        self._fixed_pid = pid
        self.processes: ProcessTable = processes or LocalProcesses()
        self._reset()
        _identities.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a lock held by a parent thread at fork is not ours
        self.host = self._fixed_host or host_identity()
        self.pid = self._fixed_pid if self._fixed_pid is not None else os.getpid()
        self.incarnation = uuid.uuid4().hex
        self._held: set[RunKey] = set()
        self._claiming = 0
        self._abandoned: dict[RunKey, str] = {}

    @property
    def owner(self) -> Owner:
        return Owner(host=self.host, pid=self.pid, incarnation=self.incarnation)

    def renew_incarnation(self) -> Owner:
        """Become a new incarnation (after losing the liveness token); forget all runs."""
        with self._lock:
            self.incarnation = uuid.uuid4().hex
            self._held.clear()
            self._abandoned.clear()
        return self.owner

    # --- the held-run registry -----------------------------------------------------

    def hold(self, job_id: str, fence: int) -> None:
        with self._lock:
            self._held.add((job_id, fence))
            self._abandoned.pop((job_id, fence), None)

    def drop(self, job_id: str, fence: int, *, abandoned: str | None = None) -> None:
        """Forget one run; with `abandoned`, the reason recovery will record."""
        with self._lock:
            self._held.discard((job_id, fence))
            if abandoned is not None:
                self._abandoned[(job_id, fence)] = abandoned
                while len(self._abandoned) > MAX_ABANDONED:
                    del self._abandoned[next(iter(self._abandoned))]

    def held(self) -> frozenset[RunKey]:
        with self._lock:
            return frozenset(self._held)

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """While a claim is in flight, this process may own jobs it has not registered."""
        with self._lock:
            self._claiming += 1
        try:
            yield
        finally:
            with self._lock:
                self._claiming -= 1

    # --- verdicts ------------------------------------------------------------------

    def judge(
        self, owner: Owner | None, run: RunKey | None = None, probe: Probe | None = None
    ) -> Verdict:
        """ALIVE, DEAD or UNKNOWN for `owner` holding `run` (job id, fence), with the reason."""
        if owner is None or not owner.host or not owner.incarnation:
            return Verdict(Status.UNKNOWN, "no owner identity")
        if owner.host == self.host and owner.pid == self.pid:
            if owner.incarnation == self.incarnation:
                if run is None:
                    return Verdict(Status.ALIVE, "this process")
                with self._lock:
                    if run in self._held or self._claiming:
                        return Verdict(Status.ALIVE, "held by this process")
                    why = self._abandoned.get(run)
                return Verdict(
                    Status.DEAD,
                    why or f"owner {owner} is this process, which no longer holds the job",
                    "owner_dead_not_held",
                )
            # Same pid as ours, another incarnation: an exec'd predecessor, an incarnation
            # that lost its liveness token, or a test identity: the store or lease decides.
            return self._probe(owner, probe) or Verdict(
                Status.UNKNOWN, "another incarnation of this pid; the lease decides"
            )
        if owner.host == self.host:
            verdict = self.processes.verdict(owner.pid)
            if verdict.dead:
                return Verdict(Status.DEAD, f"owner {owner}: {verdict.reason}", verdict.code)
            # A live pid may be reused; a free liveness token is proof of death.
            probed = self._probe(owner, probe)
            return probed if probed is not None and probed.dead else verdict
        return self._probe(owner, probe) or Verdict(
            Status.UNKNOWN, f"owner {owner} is on another host; the lease decides"
        )

    @staticmethod
    def _probe(owner: Owner, probe: Probe | None) -> Verdict | None:
        """The store's liveness answer, or None when it has none."""
        if probe is not None:
            try:
                answer = probe(owner)
            except Exception as err:  # a failed probe proves nothing
                return Verdict(Status.UNKNOWN, f"liveness probe failed: {err}")
            if answer == "dead":
                return Verdict(
                    Status.DEAD,
                    f"owner {owner}: its liveness token is free",
                    "owner_dead_lock_free",
                )
            if answer == "alive":
                return Verdict(Status.ALIVE, f"owner {owner}: its liveness token is held")
        return None


_default: Identity | None = None
_default_lock = threading.Lock()


def current() -> Identity:
    """The identity of this process (one per process, renewed after fork)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Identity()
        return _default


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()
    for identity in list(_identities):
        identity._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
