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

Liveness modes (`LIVENESS_ENV`, docs/workers.md "Liveness on macOS"): "full" reads
the boot id and PID namespace from /proc, so a pid on "this host" is known to be
one, and confirms a local owner's death by its pid. Where /proc does not give them
(macOS, a locked-down container) the mode is "lease": the host name alone cannot
tell two hosts apart, so no pid is ever judged, and a lost run of another process is
recovered when its lease expires, or at once where the store's liveness token
says so (PostgreSQL). "auto", the default, picks "full" when it can.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import socket
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import attrs

from ..errors import BadInput
from ..records import Owner

#: Test hook: replaces the host identity, so one machine can pose as another host.
#: Processes that share a value judge each other's pids as their own: never set it
#: in production (a fleet sharing one value would take live workers for dead ones).
HOST_ENV = "JOBFSM_HOST_ID"
_warned: set[str] = set()
log = logging.getLogger(__name__)

#: Most abandon reasons remembered for the sweep (oldest forgotten first).
MAX_ABANDONED = 10_000

#: How this process judges other processes' liveness: "auto" (the default), "full"
#: (needs /proc) or "lease" (lease-only: no pid is judged). See the module docstring.
LIVENESS_ENV = "JOBFSM_LIVENESS"
LIVENESS_MODES = ("auto", "full", "lease")
#: what a lease-only host identity ends with, in place of boot id and PID namespace
LEASE_ONLY_HOST = "lease-only"
#: where the host facts are read (a test points it at a folder without them)
PROC_ROOT = "/proc"


def _proc_facts() -> tuple[str, str] | None:
    """This host's boot id and PID namespace inode from /proc; None where /proc lacks them."""
    try:
        with open(f"{PROC_ROOT}/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        link = os.readlink(f"{PROC_ROOT}/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    pidns = link.rsplit("[", 1)[-1].rstrip("]")
    return (boot, pidns) if boot and pidns else None


def liveness_mode(requested: str | None = None) -> str:
    """ "full" or "lease": `requested` (else $JOBFSM_LIVENESS, else "auto") resolved on
    this host. "full" where /proc lacks a boot id or PID namespace raises BadInput."""
    mode = requested or os.environ.get(LIVENESS_ENV) or "auto"
    if mode not in LIVENESS_MODES:
        raise BadInput(
            f"liveness mode must be one of {', '.join(LIVENESS_MODES)}; got {mode!r:.40} "
            f"(from {'the caller' if requested else LIVENESS_ENV})"
        )
    if mode == "lease":
        return mode
    if _proc_facts() is not None:
        return "full"
    if mode == "full":
        raise BadInput(
            "liveness mode 'full' needs /proc (a boot id and a PID namespace): use "
            f"'lease' or 'auto' on this platform ({sys.platform})"
        )
    return "lease"


def host_identity(mode: str = "full") -> str:
    """hostname:boot id:PID namespace inode ("full"), hostname:lease-only ("lease"),
    or $JOBFSM_HOST_ID when set."""
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
    facts = _proc_facts() if mode == "full" else None
    if facts is None:
        return f"{socket.gethostname()}:{LEASE_ONLY_HOST}"
    return f"{socket.gethostname()}:{facts[0]}:{facts[1]}"


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


class LeaseOnly:
    """No process table: every pid is UNKNOWN, so the lease (or the store's liveness
    token) decides. The table of the "lease" liveness mode."""

    def verdict(self, pid: int) -> Verdict:
        return Verdict(
            Status.UNKNOWN, f"pid {pid}: lease-only liveness judges no pid; the lease decides"
        )


def _warn_lease_only(platform: str) -> None:
    if "lease-only" in _warned:
        return
    _warned.add("lease-only")
    log.warning(
        "liveness is lease-only on this host (%s): a killed worker's runs are recovered "
        "when their lease expires, not at once (PostgreSQL's liveness lock still confirms "
        "death); see docs/workers.md, 'Liveness on macOS'",
        platform,
    )


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
    `liveness` is the mode ("auto", "full", "lease"; default $JOBFSM_LIVENESS, else
    "auto"); `self.liveness` is the one in force, "full" or "lease".
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        pid: int | None = None,
        processes: ProcessTable | None = None,
        liveness: str | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._fixed_host = host
        self._fixed_pid = pid
        self.liveness = "full" if processes is not None else liveness_mode(liveness)
        if processes is None:
            processes = LocalProcesses() if self.liveness == "full" else LeaseOnly()
            if self.liveness == "lease":
                _warn_lease_only(sys.platform)
        self.processes: ProcessTable = processes
        self._reset()
        _identities.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a lock held by a parent thread at fork is not ours
        self.host = self._fixed_host or host_identity(self.liveness)
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
        self.hold_many([(job_id, fence)])

    def hold_many(self, runs: Iterable[RunKey]) -> None:
        """`hold` each of `runs` (job id, fence), under one take of the lock."""
        with self._lock:
            for run in runs:
                self._held.add(run)
                self._abandoned.pop(run, None)

    def drop(self, job_id: str, fence: int, *, abandoned: str | None = None) -> None:
        """Forget one run; with `abandoned`, the reason recovery will record."""
        self.drop_many([(job_id, fence)], abandoned=abandoned)

    def drop_many(self, runs: Iterable[RunKey], *, abandoned: str | None = None) -> None:
        """`drop` each of `runs` (job id, fence), under one take of the lock."""
        with self._lock:
            for run in runs:
                self._held.discard(run)
                if abandoned is not None:
                    self._abandoned[run] = abandoned
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
