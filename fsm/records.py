"""Frozen records: jobs, owners, audit entries and decisions. Changes are `evolve`."""

from __future__ import annotations

import json
import operator
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import attrs

from .errors import DuplicateJob
from .jsonio import decode

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: random bytes read from the operating system at a time, for `new_id` (409 ids a read)
ENTROPY_BLOCK = 4096


class Entropy:
    """The operating system's random bytes (`os.urandom`), read a block at a time.

    Why: `os.urandom` releases the interpreter lock around its system call, so a thread
    that submits while another is busy (a RabbitMQ sender, a worker's threads) handed
    the lock over once per id: a submitter publishing wake-ups spent about as much CPU
    on those hand-offs (one context switch per job) as on the submit itself. A block
    serves 409 ids with one call. A forked child forgets its parent's block (it would
    hand out the same ids) and the lock another thread may have held across the fork.
    """

    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._block = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        """`n` (at most ENTROPY_BLOCK) random bytes never handed out before."""
        with self._lock:
            if self._at + n > len(self._block):
                self._block = os.urandom(ENTROPY_BLOCK)
                self._at = 0
            got = self._block[self._at : self._at + n]
            self._at += n
        return got


_entropy = Entropy()


def new_id(now: float | None = None) -> str:
    """A 26-character, time-sortable id (48-bit milliseconds + 80 random bits)."""
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (ms << 80) | int.from_bytes(_entropy.take(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def first_id_at(at: float) -> str:
    """The lowest id `new_id` can make at time `at` (its random bits all zero): ids made
    at or after `at` sort at or above it, those made before sort below (a time range
    as a range of ids)."""
    ms = max(0, int(at * 1000)) & ((1 << 48) - 1)
    value = ms << 80
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


@attrs.frozen
class Owner:
    """Who holds a lease: host identity, pid and a per-process incarnation."""

    host: str
    pid: int
    incarnation: str

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "incarnation": self.incarnation}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        return cls(
            host=str(data["host"]), pid=int(data["pid"]), incarnation=str(data["incarnation"])
        )

    def __str__(self) -> str:
        return f"{self.host}/pid {self.pid}/{self.incarnation[:8]}"


@attrs.frozen
class Job:
    """One job. `version` grows on every decision written; `fence` on every lease.

    `progress_json` is the latest progress its handler reported (`ctx.progress`),
    written by the owner without an audit entry and without a version bump
    (docs/workers.md, "Progress"): no decision reads it, so it never makes a
    report lose a compare-and-set, and no decision writes it (but `erase`).
    """

    id: str
    kind: str
    queue: str
    payload_json: str
    state: str
    created_at: float
    updated_at: float
    run_after: float
    priority: int = 0
    attempt: int = 0
    max_attempts: int = 10
    recoveries: int = 0
    max_recoveries: int = 3
    deadline: float | None = None
    timeout: float | None = None
    retry_safe: bool = True
    fence: int = 0
    version: int = 1
    owner: Owner | None = None
    lease_until: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    idempotency_key: str | None = None
    correlation_id: str | None = None
    last_error: str | None = None
    result_json: str | None = None
    progress_json: str | None = None
    #: with prerequisites (`after=`): "cancel", "run" or "investigate" when one of them
    #: fails (docs/dependencies.md); None for a job without prerequisites
    on_failed_dependency: str | None = None
    #: marks of the current attempt; None when its handler does not declare that it
    #: marks before every outside call (then whether one began is unknown)
    marks: int | None = None
    #: the running attempt's kind declares a reconciler (`fsm.service.reconcile`): a sweep
    #: without it leaves the lost run a while to a worker that has it
    reconciler: bool = False
    #: the submitter said `retry_safe=False` for this very job: no handler's policy
    #: loosens it at start (docs/concepts.md, "Whose policy holds")
    retry_safe_pinned: bool = False
    #: the key of a unique submit (`fsm.inputs.Unique`, docs/uniqueness.md): a submit of
    #: this kind with this key returns (or refuses) this job while it is in the scope
    unique_key: str | None = None

    @property
    def payload(self) -> Any:
        return decode(self.payload_json)

    @property
    def result(self) -> Any:
        return decode(self.result_json)


JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(Job))


def job_to_json(job: Job) -> str:
    """A job as JSON, to cross a process boundary (never pickle)."""
    data = attrs.asdict(job, recurse=False)
    data["owner"] = job.owner.to_dict() if job.owner is not None else None
    return json.dumps(data, separators=(",", ":"))


def job_from_json(text: str) -> Job:
    data = json.loads(text)
    if data.get("owner") is not None:
        data["owner"] = Owner.from_dict(data["owner"])
    return Job(**data)


_job_values = operator.attrgetter(*JOB_FIELDS)
_JOB_INDEX = {name: i for i, name in enumerate(JOB_FIELDS)}


def evolve_job(job: Job, changes: dict[str, Any]) -> Job:
    """`attrs.evolve(job, **changes)` without its per-call introspection.

    `decide` runs on every transition and evolve's generic path costs about as
    much as the rest of the decision; this builds the same positional arguments
    directly. `test_evolve_job_matches_attrs_evolve` pins the equivalence.
    """
    values = list(_job_values(job))
    try:
        for name, value in changes.items():
            values[_JOB_INDEX[name]] = value
    except KeyError as err:
        raise TypeError(f"Job has no field {err.args[0]!r}") from None
    return Job(*values)


@attrs.frozen
class AuditEntry:
    """One line of a job's audit trail; `outcome` is "applied" or "rejected"."""

    job_id: str
    version: int
    at: float
    event: str
    from_state: str | None
    to_state: str
    fence: int
    attempt: int
    actor: str | None = None
    reason: str | None = None
    error: str | None = None
    correlation_id: str | None = None
    outcome: str = "applied"
    data_json: str = "{}"
    #: the machine-readable reason (a code of the spec's [codes]); None only on
    #: entries written before reason codes existed
    code: str | None = None
    #: where in its run the job failed, for entries that record a failure (the spec's
    #: [stages]: claim, start, handler, report, recovery); None on the others and on
    #: entries written before stages existed
    stage: str | None = None

    @property
    def data(self) -> dict[str, Any]:
        value = decode(self.data_json)
        return value if isinstance(value, dict) else {}

    @property
    def lost_owner(self) -> Owner | None:
        """The owner whose run a recovery (`expire`) took back; None on other entries
        and on recoveries written before their entries named it."""
        found = self.data.get("lost_owner")
        if not isinstance(found, dict):
            return None
        try:
            return Owner.from_dict(found)
        except (KeyError, TypeError, ValueError):
            return None


AUDIT_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(AuditEntry))


@attrs.frozen
class UniqueScope:
    """Where a unique submit looks for its twin (docs/uniqueness.md): the jobs of `kind`
    with unique key `key` that are in one of `states` and were created after `since`
    (exclusive; -inf: no time window). `refuse`: a twin raises `DuplicateJob` instead of
    being returned. `fsm.lifecycle.unique.scope` resolves it from the caller's
    `fsm.inputs.Unique`; `covers` and `twin` are the one test of a duplicate: every
    store asks them of the candidates its own index finds, inside its insert's lock."""

    kind: str
    key: str
    states: tuple[str, ...]
    since: float
    refuse: bool = False

    def covers(self, job: Job) -> bool:
        """Whether `job` is a twin of the submit: same kind and key, in scope."""
        return (
            job.kind == self.kind
            and job.unique_key == self.key
            and job.state in self.states
            and job.created_at > self.since
        )

    def twin(self, candidates: Iterable[Job]) -> Job | None:
        """The newest candidate this scope covers, or None (the submit is new). With
        `refuse`, a twin raises DuplicateJob naming it (the store writes nothing)."""
        best: Job | None = None
        for job in candidates:
            if self.covers(job) and (
                best is None or (job.created_at, job.id) > (best.created_at, best.id)
            ):
                best = job
        if best is not None and self.refuse:
            raise DuplicateJob(best, self.key)
        return best


@attrs.frozen
class Decision:
    """What `decide` concluded: the new record and the audit entry that explains it.

    `entry` is None only for events the spec marks `audited = false` (heartbeat).
    """

    job: Job
    entry: AuditEntry | None
    event: str
    previous: Job | None
    #: a submit decision's prerequisites (`after=`): the store records them with the job
    prerequisites: tuple[str, ...] = ()
    #: a unique submit's scope (`fsm.inputs.Unique`): the store returns the twin it covers
    unique: UniqueScope | None = None

    def since(self, previous: Job | None) -> Decision:
        """This decision as a write from `previous` (a claim-and-start writes its start
        from the pre-image of its lease): `attrs.evolve(self, previous=previous)`
        without its per-call introspection (2.3 against 0.6 us, once per claimed job)."""
        return Decision(self.job, self.entry, self.event, previous, self.prerequisites, self.unique)
