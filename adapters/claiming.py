"""How every store applies a claim's decisions: a job the core refuses to lease is
skipped alone (`Unclaimable`, `decide_leases`), and a claim that also starts its jobs
writes each from its pre-image to `running` at once (`Claimed`, `start_leased`).

The core decides; these only carry its decisions out, alike in every store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import attrs

from fsm.lifecycle.limits import Budget, Limit, job_keys
from fsm.ports import ClaimRequest
from fsm.records import AuditEntry, Decision, Job

log = logging.getLogger(__name__)

#: how many unclaimable job ids a store remembers (oldest forgotten first)
UNCLAIMABLE_REMEMBERED = 1024
#: seconds a remembered unclaimable job is left out of claims before it is tried again
UNCLAIMABLE_RECHECK = 600.0


class Unclaimable:
    """Jobs whose `lease` decision raised during a claim: skipped, each logged once.

    A row the store's due filter selects but the core refuses to lease (a NaN time
    written behind jobfsm's back, a row edited by hand) must fail alone: the claim
    skips it and leases the jobs behind it. Each such job is logged once (with its
    id) and left out of this process's claims for UNCLAIMABLE_RECHECK seconds, so
    it costs no claim a slot; at most UNCLAIMABLE_REMEMBERED ids are remembered.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def known(self) -> list[str]:
        """Ids to leave out of claims (refused within the last UNCLAIMABLE_RECHECK s)."""
        if not self._seen:
            return []
        cutoff = time.monotonic() - UNCLAIMABLE_RECHECK
        with self._lock:
            for job_id in [i for i, at in self._seen.items() if at < cutoff]:
                del self._seen[job_id]
            return list(self._seen)

    def skip(self, job: Job, err: BaseException) -> None:
        with self._lock:
            if job.id in self._seen:
                return
            if len(self._seen) >= UNCLAIMABLE_REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[job.id] = time.monotonic()
        self._log.warning(
            "job %s (queue %r, state %r) cannot be leased: its lease decision failed "
            "(%s: %s); claims skip it and lease the jobs behind it",
            job.id,
            job.queue,
            job.state,
            type(err).__name__,
            err,
            extra={"job_id": job.id},
        )


def decide_leases(
    candidates: Iterable[Job], decide: Callable[[Job], Decision], skipped: Unclaimable
) -> tuple[list[Decision], list[str]]:
    """The core's lease decision for each candidate, and the ids of those it refused."""
    decisions: list[Decision] = []
    refused: list[str] = []
    for job in candidates:
        try:
            decisions.append(decide(job))
        except Exception as err:  # one job the core refuses fails alone, never the batch
            skipped.skip(job, err)
            refused.append(job.id)
    return decisions, refused


@attrs.frozen
class Claimed:
    """One job of a claim as the store writes it: `write` is the compare-and-set from
    the pre-image (`write.previous`) to the record returned (`write.job`: running after
    a claim-and-start, leased otherwise); `entries` are its audit entries in order.
    `write.entry` is the last of them (what a lost commit is reconciled by)."""

    write: Decision
    entries: tuple[AuditEntry, ...]


def start_leased(
    leases: Sequence[Decision], start: Callable[[Job], Decision] | None
) -> list[Claimed]:
    """Each lease decision, followed by the core's `start` decision on the leased record
    when the claim asks for one (`ClaimRequest.start`): one write per job from its
    pre-image to where it ends, both audit entries. A job whose start decision raises
    stays leased (logged); the caller starts it, or fails it, on its own."""
    out: list[Claimed] = []
    for lease in leases:
        entries: tuple[AuditEntry, ...] = () if lease.entry is None else (lease.entry,)
        if start is not None:
            try:
                begun = start(lease.job)
            except Exception as err:  # this job alone is not started here
                log.info("job %s: leased but not started in its claim: %s", lease.job.id, err)
            else:
                if begun.entry is not None:
                    entries += (begun.entry,)
                write = begun.since(lease.previous)
                out.append(Claimed(write, entries))
                continue
        out.append(Claimed(lease, entries))
    return out


#: most rounds a claim under limits looks again past jobs a limit held back (each round
#: after the first follows a kind or queue whose budget the previous round spent)
LIMIT_ROUNDS = 8

#: a store's fetch of candidates for a claim under limits: (how many, ids to leave out,
#: kinds to leave out, the queues still open) -> due jobs in lease order
Fetch = Callable[[int, Sequence[str], Sequence[str], tuple[str, ...]], list[Job]]


def claim_within(request: ClaimRequest, budget: Budget, fetch: Fetch) -> list[Job]:
    """The candidates a claim under limits leases (pre-images, in lease order).

    Each round fetches as many due jobs as are still wanted, leaving out the jobs taken
    and the kinds and queues whose budget is spent, and admits those the budget allows
    (`Budget.admit`). A job a limit holds back is not touched: it stays queued, its
    `run_after` unchanged, no attempt charged. A round that held a job back spent a
    budget, so the next one leaves that kind (or queue) out and reaches the jobs
    behind it: a limited kind never blocks the other kinds of its queue.
    """
    taken: list[Job] = []
    for _ in range(LIMIT_ROUNDS):  # bounded: each further round follows a spent budget
        wanted = request.limit - len(taken)
        closed = set(budget.blocked("queue"))
        queues = tuple(q for q in request.queues if q not in closed)
        if wanted <= 0 or not queues:
            break
        rows = fetch(wanted, [j.id for j in taken], budget.blocked("kind"), queues)
        got, held_back = budget.admit(rows, wanted)
        taken += got
        if not held_back or len(rows) < wanted:
            break
    return taken


def rate_marks(limits: Iterable[Limit], jobs: Iterable[Job], now: float) -> list[tuple[str, float]]:
    """(key, time) of each lease that counts against a rate limit: the rows a claim adds
    to its store's sliding windows (`limit_leases`)."""
    rated = {lim.key for lim in limits if lim.rate is not None}
    return [(k, now) for job in jobs for k in job_keys(job) if k in rated]
