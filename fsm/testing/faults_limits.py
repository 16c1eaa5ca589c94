"""The `limits` fault model: global concurrency and rate limits under claims, finishes,
lost leases, cancels, limit changes and racing claimers (docs/flow-control.md).

Each example opens a fresh database, submits jobs of a kind limited in concurrency
(`capped`), one limited in rate (`rated`) and one without a limit (`free`), all in
one queue that may carry a limit of its own (concurrency, rate or both), then drives
the production `Engine.claim` (plain and claim-and-start, one claimer or several racing on their
own store handles, kept from race to race, and workers that start mid-race on fresh
handles), lets jobs finish, fail, get cancelled, lose their owner, moves
the clock across rate windows, lowers or raises the concurrency limit and sets a
limit on a key none named before (the free kind, then the queue) while the handles
that claimed know only the others.

Promises, from the audit trails and the records read around each claim:

- L1 never more than N jobs of a concurrency-limited kind (or queue) hold a slot
  (leased, running, cancelling) at any instant of the audit trail: each lease finds
  fewer than the limit in force holding one;
- L2 never more than R leases of a rate-limited kind (or queue) in any window of P
  seconds;
- L3 a job a claim held back is never charged for waiting: it is unchanged (state,
  run_after, attempt, version), no entry added to its trail;
- L4 a limited kind never blocks the other kinds of its queue: a claim that leased
  fewer jobs than it asked for left no due job behind whose kind and queue had room;
  and a queue no limit names (a kind of its own there) is claimed as if no limit
  were stored;
- L5 limits are kept as set: a bad limit is refused by name and changes nothing,
  every change is in the audit of limit changes (newest first, with its actor), the
  status counts the jobs holding a slot and waiting, and a worker's own cap
  (`ClaimRequest.caps`, `jobfsm worker --limit`) holds beside the global limits: after
  a claim with a cap of N, counted from the store, the worker holds at most N jobs of
  the key, the jobs it held before the claim included.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from hypothesis import example, given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import BadInput
from ..inputs import KindPolicy
from ..lifecycle.limits import Limit, job_keys
from ..lifecycle.spec import lifecycle
from ..ports import LimitsClaims, ScanRequest, Store
from ..records import AuditEntry, Job, Owner
from ..service.engine import Engine
from ..service.limits import limit_changes, limit_rows, worker_caps, worker_limits
from .faults_machine import suite_policy
from .faults_models import ModelRun

KINDS = ("capped", "rated", "free")
HELD = frozenset(("leased", "running", "cancelling"))
ACTOR, REASON = "limits-model", "fault model"
#: a step's clock moves, as fractions of the rate period (just inside and at its end)
ADVANCES = (0.25, 0.5, 0.9995, 1.0)
#: a limit change is this much after the step before it and before the step after it,
#: so the trail orders it
TICK = 1e-6

_step = st.one_of(
    st.tuples(st.just("claim"), st.integers(1, 10), st.booleans()),
    st.tuples(st.just("race"), st.integers(2, 4), st.integers(1, 3), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.sampled_from(ADVANCES)),
    st.tuples(st.just("finish"), st.integers(0, 63)),
    st.tuples(st.just("fail"), st.integers(0, 63)),
    st.tuples(st.just("lose"), st.integers(0, 63)),
    st.tuples(st.just("cancel"), st.integers(0, 63)),
    st.tuples(st.just("relimit"), st.integers(1, 4)),
    st.tuples(st.just("newlimit"), st.integers(1, 2)),
    st.tuples(st.just("capped_claim"), st.integers(1, 3), st.integers(1, 6)),
    st.tuples(st.just("bad"), st.integers(0, 5)),
    st.tuples(st.just("status")),
    st.tuples(st.just("elsewhere"), st.integers(1, 3)),
)
#: jobs of a kind without a limit in a queue of their own, beside the limited queue
ELSEWHERE = 3
#: bad limits a step tries (each must be refused and change nothing)
BAD: tuple[dict[str, Any], ...] = (
    {"concurrency": 0},
    {"concurrency": -2},
    {"rate": 3, "period": 0.0001},
    {"rate": 3, "period": float("nan")},
    {"rate": 3},
    {},
)
#: the queue's own limit: none, a concurrency, a rate, or both (an int: a concurrency)
QUEUE_LIMITS: tuple[dict[str, Any] | None, ...] = (
    None,
    None,
    {"concurrency": 3},
    {"concurrency": 5},
    {"rate": 2, "period": 1.0},
    {"concurrency": 5, "rate": 3, "period": 2.5},
)
_example = st.fixed_dictionaries(
    {
        "capped": st.integers(1, 8),
        "rated": st.integers(1, 8),
        "free": st.integers(1, 5),
        "free_priority": st.sampled_from((-1, 0, 1, 5)),
        "concurrency": st.integers(1, 3),
        "rate": st.integers(1, 3),
        "period": st.sampled_from((1.0, 2.5)),
        "queue_limit": st.sampled_from(QUEUE_LIMITS),
        "steps": st.lists(_step, min_size=1, max_size=25),
    }
)

#: checked first, at every size: the rate used up, then a claim just inside the end of
#: its window (0.9995 of the period later) must lease no job of the rated kind; a window
#: a hair short lets leases through that the drawn examples reach only by chance. Then
#: a claim of another queue, which no limit names, leases as if there were no limits
RATE_WINDOW_EDGE: dict[str, Any] = {
    "capped": 1,
    "rated": 4,
    "free": 1,
    "free_priority": 0,
    "concurrency": 1,
    "rate": 2,
    "period": 1.0,
    "queue_limit": None,
    "steps": [
        ("claim", 10, False),
        ("advance", 0.9995),
        ("claim", 10, False),
        ("elsewhere", 1),
        ("elsewhere", 1),
    ],
}

#: checked first too: a claim spends the capped kind and the rated kind's budgets; a
#: capped run ends and the same handle claims again: the kind its last claim found
#: spent has room now and must be leased (PostgreSQL leaves the kinds its handle last
#: found spent out of its first candidates and must fetch again), and once the rate
#: window has passed the rated kind too
SPENT_THEN_FREED: dict[str, Any] = {
    "capped": 3,
    "rated": 4,
    "free": 1,
    "free_priority": 0,
    "concurrency": 1,
    "rate": 2,
    "period": 1.0,
    "queue_limit": None,
    "steps": [
        ("claim", 10, False),
        ("finish", 0),
        ("claim", 10, True),
        ("advance", 1.0),
        ("claim", 10, False),
    ],
}

#: checked first too: four claimers of one job each race to a concurrency limit of 3,
#: the slots free up, and the same claimers (their store handles kept) race again:
#: each counts room for its one job, and the fourth must not lease it (PostgreSQL
#: counts ahead of its key locks there and checks at the commit)
#: races of RACE_AGAIN after the first
RACE_ROUNDS = 8
RACE_AGAIN: dict[str, Any] = {
    "capped": 30,
    "rated": 1,
    "free": 1,
    "free_priority": 0,
    "concurrency": 3,
    "rate": 3,
    "period": 2.5,
    "queue_limit": None,
    # the first race takes the locked path (fresh handles); each later one may count
    # ahead, and whether the counts overlap is up to the threads: RACE_ROUNDS of them
    "steps": [
        ("race", 4, 1),
        *[step for _ in range(RACE_ROUNDS) for step in (*[("finish", 0)] * 4, ("race", 4, 1))],
    ],
}


#: checked first too: RACE_AGAIN with the capped kind's limit the only one stored (no
#: rate limit): each racing claim then leases under every limit that applies to it, so
#: the commit's check of the leases granted since the count is all that stands between
#: four claimers and a fourth slot (a check that names no limit, or the wrong ones,
#: lets them all through; naming a limit the claim did not lease under fails closed)
RACE_ONE_LIMIT: dict[str, Any] = {**RACE_AGAIN, "rate": None}

#: checked first too: a limit of 20 and eight claimers racing for one job each: the
#: first race counts under the locks (fresh handles), the second ahead of them (12 of
#: room; each handle keeps its count) and the third within the counts they kept, whose
#: room shrinks by the leases granted since (4 left: the fifth claim to commit must
#: count again and find none); every run then ends and it all happens once more. A
#: claim that took its kept count as made now would let all eight through whenever
#: five of them read the totals before the others committed
KEPT_COUNTS: dict[str, Any] = {
    **RACE_AGAIN,
    "capped": 60,
    "rate": None,
    "concurrency": 20,
    "steps": [
        *[("race", 8, 1)] * 3,
        *[("finish", 0)] * 20,
        *[("race", 8, 1)] * 3,
    ],
}


#: checked first too: workers that start while others claim. Four claimers race to a
#: concurrency limit of 6 on fresh handles (counted under the key locks), then again
#: (counted ahead; each handle keeps its count); then four workers start and race
#: beside them: their first claims count under the locks while the others lease within
#: the counts they kept, which only the running totals of leases tell about the
#: newcomers' leases (a claim counted under the locks that left the totals as they
#: were would let eight through whenever the newcomers commit first). Once more with
#: eight kept handles and four newcomers; the status and bad limits read between
WORKERS_JOIN: dict[str, Any] = {
    **RACE_AGAIN,
    "capped": 60,
    "rate": None,
    "concurrency": 6,
    "steps": [
        ("race", 4, 1),
        *[("finish", 0)] * 4,
        ("race", 4, 1),
        *[("finish", 0)] * 4,
        ("race", 8, 1, 4),
        ("status",),
        ("bad", 0),
        ("bad", 2),
        *[("finish", 0)] * 6,
        ("race", 8, 1),
        *[("finish", 0)] * 6,
        ("race", 12, 1, 4),
    ],
}


#: checked first too: a handle claims under the limits it read, then a limit appears on
#: a key none named (the free kind, 1 running) and the same handle claims again: it
#: must lease under the new limit too (PostgreSQL counts ahead under the limits its last
#: claim read, reads them again with its counts and counts again if they changed; a
#: claim that went on under the old ones would lease every free job at once)
NEW_KEY: dict[str, Any] = {
    "capped": 1,
    "rated": 1,
    "free": 5,
    "free_priority": 0,
    "concurrency": 1,
    "rate": 1,
    "period": 1.0,
    "queue_limit": None,
    "steps": [("claim", 1, False), ("newlimit", 1), ("claim", 10, False)],
}


#: checked first too: a queue's concurrency limit meets jobs already holding a slot:
#: two are leased, then a claim of ten may lease one more (the queue allows three);
#: a count that charged held jobs to their kinds only would let three more through
QUEUE_HELD: dict[str, Any] = {
    "capped": 2,
    "rated": 1,
    "free": 6,
    "free_priority": 0,
    "concurrency": 3,
    "rate": 3,
    "period": 1.0,
    "queue_limit": {"concurrency": 3},
    "steps": [("claim", 2, False), ("claim", 10, False), ("claim", 10, True)],
}


def holding_intervals(trail: Sequence[AuditEntry]) -> list[tuple[float, float]]:
    """[start, end) of each time the job held a slot (end: inf while it holds one)."""
    out: list[tuple[float, float]] = []
    since: float | None = None
    for e in trail:
        if e.outcome != "applied":
            continue
        was = e.from_state in HELD
        now = e.to_state in HELD
        if now and not was:
            since = e.at
        elif was and not now and since is not None:
            out.append((since, e.at))
            since = None
    if since is not None:
        out.append((since, float("inf")))
    return out


def lease_times(trail: Sequence[AuditEntry]) -> list[float]:
    """When each lease of the job was granted."""
    return [e.at for e in trail if e.outcome == "applied" and e.event == "lease"]


def concurrency_breaches(
    intervals: Sequence[tuple[float, float]], limit_at: Callable[[float], int | None]
) -> list[tuple[float, int, int]]:
    """(time, holding, limit) of each slot taken when `limit_at(time)` or more already
    held one: L1 over the [start, end) intervals of one key (an end at t is before a
    start at t; the starts at t are counted together, as one claim grants them)."""
    out: list[tuple[float, int, int]] = []
    for start, _ in intervals:
        limit = limit_at(start)
        if limit is None:
            continue
        holding = sum(1 for s, e in intervals if s <= start < e)
        if holding > limit:
            out.append((start, holding, limit))
    return out


def rate_breaches(times: Sequence[float], rate: int, period: float) -> list[tuple[float, int]]:
    """(window start, leases) of each window of `period` s holding more than `rate`
    leases (L2): after sorting, leases i and i+rate must be `period` or more apart."""
    ordered = sorted(times)
    return [
        (ordered[i], rate + 1)
        for i in range(len(ordered) - rate)
        if ordered[i + rate] - ordered[i] < period
    ]


class LimitsModel:
    name: ClassVar[str] = "limits"
    about: ClassVar[str] = (
        "global concurrency and rate limits: claims, lost leases, limit changes, racing claimers"
    )
    examples: ClassVar[dict[str, int]] = {"quick": 10, "default": 60, "thorough": 600}

    def run(self, ctx: ModelRun) -> None:
        @ctx.settings(self.examples[ctx.size])
        @given(example=_example)
        @example(example=RATE_WINDOW_EDGE)
        @example(example=SPENT_THEN_FREED)
        @example(example=RACE_AGAIN)
        @example(example=RACE_ONE_LIMIT)
        @example(example=KEPT_COUNTS)
        @example(example=WORKERS_JOIN)
        @example(example=NEW_KEY)
        @example(example=QUEUE_HELD)
        def one(example: dict[str, Any]) -> None:
            with ctx.database() as opener:
                _Example(ctx, opener, example).run()

        one()


class _Example:
    """One example: its engine, its jobs, the limits in force over time."""

    def __init__(self, ctx: ModelRun, opener: Callable[[], Store], example: dict[str, Any]):
        self.ctx = ctx
        self.opener = opener
        self.store = opener()
        self.x = example
        # the examples of a PostgreSQL run share its schema: each has its own queue and
        # kinds (a kind's limit holds across queues), and clears its limits at the end
        tag = uuid.uuid4().hex[:10]
        self.queue = f"limits-{tag}"
        self.kinds = {k: f"{k}-{tag}" for k in KINDS}
        #: a queue and kind no limit names: the limits of `queue` must not touch them
        self.other_queue, self.other_kind = f"limits-other-{tag}", f"other-{tag}"
        self.others: list[str] = []
        self.elsewhere_claims = 0
        self.clock = FakeClock()
        self.engine = self._engine(self.store)
        self.sources = frozenset(self.engine.spec.sources("lease"))
        self.ids: list[str] = []
        #: key -> [(from time, concurrency)] in the order they were set
        self.concurrency: dict[str, list[tuple[float, int]]] = {}
        #: key -> (rate, period) of each key limited in rate
        self.rates: dict[str, tuple[int, float]] = {}
        #: key -> how many changes this example made to it
        self.changes: dict[str, int] = {}
        #: the racing claimers' engines, each on a store handle of its own
        self.claimers: list[Engine] = []

    def _engine(self, store: Store) -> Engine:
        return Engine(
            store,
            clock=self.clock,
            policy=suite_policy(),
            kinds={
                **{k: KindPolicy(queue=self.queue) for k in self.kinds.values()},
                self.other_kind: KindPolicy(queue=self.other_queue),
            },
            spec=lifecycle(),
        )

    def _set(self, key: str, **values: Any) -> None:
        self.clock.advance(TICK)  # strictly after the leases before it, and before those after
        limit = self.engine.set_limit(key, **values, actor=ACTOR, reason=REASON)
        self.changes[key] = self.changes.get(key, 0) + 1
        if limit.concurrency is not None:
            self.concurrency.setdefault(key, []).append((self.clock.now(), limit.concurrency))
        if limit.rate is not None and limit.period is not None:
            self.rates[key] = (limit.rate, limit.period)
        else:
            self.rates.pop(key, None)
        self.clock.advance(TICK)

    def run(self) -> None:
        x = self.x
        for kind, n, priority in (
            ("capped", x["capped"], 0),
            ("rated", x["rated"], 0),
            ("free", x["free"], x["free_priority"]),
        ):
            for i in range(n):
                job = self.engine.submit(self.kinds[kind], i, queue=self.queue, priority=priority)
                self.ids.append(job.id)
        for i in range(ELSEWHERE):
            job = self.engine.submit(self.other_kind, i, queue=self.other_queue)
            self.others.append(job.id)
        try:
            self._set(self.capped, concurrency=x["concurrency"])
            if x["rate"] is not None:  # None: the rated kind runs without a limit
                self._set(self.rated, rate=x["rate"], period=x["period"])
            queue_limit = x["queue_limit"]
            if isinstance(queue_limit, int):
                queue_limit = {"concurrency": queue_limit}
            if queue_limit is not None:
                self._set(f"queue:{self.queue}", **queue_limit)
            for step in x["steps"]:
                getattr(self, f"_{step[0]}")(*step[1:])
            self._check_trails()
            self._check_changes()
        finally:
            for key in (self.capped, self.rated, self.free, f"queue:{self.queue}"):
                self.engine.clear_limit(key, actor=ACTOR, reason="end of the example")

    @property
    def capped(self) -> str:
        return f"kind:{self.kinds['capped']}"

    @property
    def rated(self) -> str:
        return f"kind:{self.kinds['rated']}"

    @property
    def free(self) -> str:
        return f"kind:{self.kinds['free']}"

    # --- steps -----------------------------------------------------------------------

    def _read(self, ids: Sequence[str], queue: str | None = None) -> dict[str, Job | None]:
        """The jobs `ids` of the example's queue (or `queue`) as stored, in one scan of
        it, not one `get` each (the queue is the example's own); None: not stored."""
        listed = self.store.scan(
            ScanRequest(states=self.engine.spec.states, queues=(queue or self.queue,), limit=10_000)
        )
        by_id = {j.id: j for j in listed}
        return {jid: by_id.get(jid) for jid in ids}

    def _jobs(self) -> list[Job]:
        """The example's jobs in this queue as stored, in the order they were submitted."""
        return [j for j in self._read(self.ids).values() if j is not None]

    def _held(self, i: int, states: Sequence[str]) -> Job | None:
        """The first job from index i on (wrapping) in one of `states`."""
        read = self._read(self.ids)
        for k in range(len(self.ids)):
            job = read[self.ids[(i + k) % len(self.ids)]]
            if job is not None and job.state in states:
                return job
        return None

    def _claim(self, limit: int, start: bool) -> None:
        before = self._read(self.ids)
        begin: Callable[[Job], dict[str, Any]] | None = (lambda job: {}) if start else None
        owner = Owner(host="limits-sim", pid=7, incarnation="limits-a")
        got = self.engine.claim(owner, (self.queue,), limit=limit, start=begin)
        self.ctx.stats.faults["claim under limits" + (" and start" if start else "")] += 1
        self._check_untouched(before, {j.id for j in got}, f"claim(limit={limit})")
        self._check_held_now(got, f"claim(limit={limit})")
        if len(got) < limit:
            self._check_fair(got, limit)

    def _race(self, claimers: int, limit: int, joining: int = 0) -> None:
        before = self._read(self.ids)
        # each claimer keeps its store handle from race to race, as a worker does: a
        # handle that claimed before may count ahead of the key locks (PostgreSQL);
        # `joining` of them are workers that start now, on fresh handles whose first
        # claim counts under the locks, racing the others' counts ahead or kept
        kept = max(claimers - joining, 0)
        while len(self.claimers) < kept:
            self.claimers.append(self._engine(self.opener()))
        fresh = [self._engine(self.opener()) for _ in range(claimers - kept)]
        for engine in fresh:  # connected before the barrier, as a started worker is
            engine.get(self.ids[0])
        engines = [*self.claimers[:kept], *fresh]
        self.claimers[kept:kept] = fresh  # the next races keep them
        if fresh:
            self.ctx.stats.faults["workers start while others claim under limits"] += 1
        got: list[Job] = []
        lock = threading.Lock()
        barrier = threading.Barrier(claimers)
        errors: list[BaseException] = []

        def claim(n: int) -> None:
            try:
                barrier.wait(timeout=30)
                owner = Owner(host="limits-sim", pid=100 + n, incarnation=f"limits-r{n}")
                jobs = engines[n].claim(owner, (self.queue,), limit=limit)
                with lock:
                    got.extend(jobs)
            except BaseException as err:  # reported below, in this thread
                errors.append(err)

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(claimers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.ctx.stats.faults[f"{claimers} claimers racing under limits"] += 1
        ids = [j.id for j in got]
        if len(set(ids)) != len(ids):
            raise AssertionError(f"L1 racing claimers leased one job twice: {sorted(ids)}")
        self._check_held_now(got, f"{claimers} racing claims")
        self._check_untouched(before, set(ids), f"{claimers} racing claims")

    def _check_held_now(self, got: Sequence[Job], what: str) -> None:
        """L1 read from the store right after a claim: a key the claim leased under now
        has at most its concurrency holding a slot (the trail check sees the same only
        while the clock moves between a lease and the end of the run)."""
        store = self.store
        assert isinstance(store, LimitsClaims)
        limits = store.limits()
        granted = {k for job in got for k in job_keys(job) if k in limits}
        jobs = self._jobs()
        for key in granted:
            cap = limits[key].concurrency
            held = sum(1 for j in jobs if j.state in HELD and key in job_keys(j))
            if cap is not None and held > cap:
                raise AssertionError(
                    f"L1 after {what}, {held} jobs of {key} hold a slot under a limit of {cap}"
                )
        self.ctx.stats.checks["L1 a claim leaves at most N holding a slot"] += 1

    def _elsewhere(self, limit: int) -> None:
        """A claim of the other queue, while limits are stored for this one: it leases
        as if no limit existed (L4: a limit blocks nothing outside its kind or queue)."""
        due = [
            j
            for j in self._read(self.others, self.other_queue).values()
            if j is not None and j.state in self.sources
        ]
        owner = Owner(host="limits-sim", pid=9, incarnation="limits-elsewhere")
        # every other time on a fresh store handle (a worker's first claim), else on the
        # example's own, which has claimed before (PostgreSQL: two paths of a claim)
        self.elsewhere_claims += 1
        fresh = self.elsewhere_claims % 2 == 1
        engine = self._engine(self.opener()) if fresh else self.engine
        # with its kinds, as a worker claims only what it has handlers for: then no
        # stored limit applies to this claim at all
        got = engine.claim(owner, (self.other_queue,), limit=limit, kinds=(self.other_kind,))
        if len(got) != min(limit, len(due)):
            raise AssertionError(
                f"L4 a claim of queue {self.other_queue}, which no limit names, leased "
                f"{len(got)} of {min(limit, len(due))} due jobs: another queue's limit "
                "blocked it"
            )
        for job in got:  # done at once: the next claim finds the rest due
            running = self.engine.start(job.id, job.fence)
            self.engine.succeed(job.id, running.fence)
        self.ctx.stats.checks["L4 a limit blocks no other queue"] += 1

    def _advance(self, fraction: float) -> None:
        self.clock.advance(fraction * self.x["period"])

    def _finish(self, i: int) -> None:
        job = self._held(i, ("running", "leased"))
        if job is None:
            return
        if job.state == "leased":
            job = self.engine.start(job.id, job.fence)
        self.engine.succeed(job.id, job.fence)

    def _fail(self, i: int) -> None:
        job = self._held(i, ("running",))
        if job is not None:
            self.engine.fail(job.id, job.fence, "fault model failure")

    def _lose(self, i: int) -> None:
        """The owner of a held job dies: recovery takes the job back."""
        job = self._held(i, tuple(HELD))
        if job is not None:
            self.engine.expire(job.id, verdict="dead", reason="limits model: owner died")
            self.ctx.stats.faults["lost lease under limits"] += 1

    def _cancel(self, i: int) -> None:
        job = self._held(i, ("running", "cancelling"))
        if job is None:
            return
        if job.state == "running":
            self.engine.cancel(job.id, actor=ACTOR, reason=REASON)
        else:
            self.engine.cancelled_ack(job.id, job.fence)

    def _relimit(self, concurrency: int) -> None:
        self._set(self.capped, concurrency=concurrency)
        self.ctx.stats.faults["concurrency limit changed"] += 1

    def _newlimit(self, concurrency: int) -> None:
        """A limit on a key no limit named until now: the free kind, or the queue once
        the free kind has one (nothing if both have). Handles that claimed before know
        only the limits they read then; their next claim must lease under this one too."""
        for key in (self.free, f"queue:{self.queue}"):
            if key not in self.concurrency and key not in self.rates:
                self._set(key, concurrency=concurrency)
                self.ctx.stats.faults["a limit set on a key none named"] += 1
                return

    def _capped_claim(self, cap: int, limit: int) -> None:
        """A worker with its own cap on the capped kind (`--limit`) claims twice in a
        row, as `jobfsm worker` polls: the second time it holds what the first leased
        (and later steps' claims what earlier ones left running)."""
        for _ in range(2):
            self._capped_claim_once(cap, limit)

    def _capped_claim_once(self, cap: int, limit: int) -> None:
        """One claim of the capped worker, with its caps less what it holds, as the
        worker computes them (`worker_caps`)."""
        before = self._read(self.ids)
        owner = Owner(host="limits-sim", pid=9, incarnation="limits-capped")
        holding = [
            j for j in before.values() if j is not None and j.owner == owner and j.state in HELD
        ]
        caps = worker_caps(worker_limits({self.kinds["capped"]: cap}), _by_key(holding))
        got = self.engine.claim(owner, (self.queue,), limit=limit, caps=caps)
        self.ctx.stats.faults["claim with a worker's own cap"] += 1
        self._check_untouched(before, {j.id for j in got}, f"claim(caps={caps})")
        # the model's own count, not the production one: the room is the cap less the
        # jobs of the kind this owner held at the claim, and after it, read from the
        # store, the owner holds at most the cap (or what it held, if the cap shrank)
        held = sum(1 for j in holding if j.kind == self.kinds["capped"])
        room = max(0, cap - held)
        mine = sum(1 for j in got if j.kind == self.kinds["capped"])
        if mine > room:
            raise AssertionError(
                f"L5 a worker with a cap of {cap} on {self.capped}, holding {held} of it, "
                f"leased {mine} more"
            )
        now_held = sum(
            1
            for j in self._jobs()
            if j.owner == owner and j.state in HELD and j.kind == self.kinds["capped"]
        )
        if now_held > max(cap, held):
            raise AssertionError(
                f"L5 after a claim with a worker's cap of {cap} on {self.capped}, the "
                f"worker holds {now_held} of it"
            )
        self.ctx.stats.checks["L5 a worker's cap holds with the jobs it already holds"] += 1

    def _bad(self, i: int) -> None:
        store = self.store
        assert isinstance(store, LimitsClaims)
        before = (store.limits(), store.limit_changes(None, 1000))
        values = BAD[i % len(BAD)]
        refused: BadInput | None = None
        try:
            self.engine.set_limit(self.capped, **values, actor=ACTOR, reason=REASON)
        except BadInput as err:
            refused = err
        if refused is None or self.capped not in str(refused):
            raise AssertionError(
                f"L5 a bad limit {values} of {self.capped} was not refused by name"
            )
        if (store.limits(), store.limit_changes(None, 1000)) != before:
            raise AssertionError(f"L5 a refused limit {values} changed the stored limits")
        self.ctx.stats.faults["bad limit"] += 1

    def _status(self) -> None:
        jobs = self._jobs()
        for key, held, waits in limit_rows(self.engine):
            if key not in (self.capped, self.rated, self.free, f"queue:{self.queue}"):
                continue
            mine = [j for j in jobs if key in job_keys(j)]
            holding = sum(1 for j in mine if j.state in HELD)
            waiting = sum(1 for j in mine if j.state in self.sources)
            if (held, waits) != (holding, waiting):
                raise AssertionError(
                    f"L5 the status of {key} says {held} holding and {waits} waiting; "
                    f"the store holds {holding} and {waiting}"
                )
        self.ctx.stats.checks["L5 a limit's status counts its jobs"] += 1

    # --- checks ----------------------------------------------------------------------

    def _check_changes(self) -> None:
        for key, n in self.changes.items():
            changes = limit_changes(self.engine.kernel, key, 1000)
            if len(changes) != n or any(c.actor != ACTOR for c in changes):
                raise AssertionError(
                    f"L5 {n} changes of {key} were made; its audit holds {len(changes)}"
                )
            if [c.seq for c in changes] != sorted((c.seq for c in changes), reverse=True):
                raise AssertionError(f"L5 the audit of {key} is not newest first")
        self.ctx.stats.checks["L5 every change of a limit is audited"] += 1

    def _check_untouched(self, before: dict[str, Job | None], taken: set[str], what: str) -> None:
        now = self._read(list(before))
        for jid, job in before.items():
            if job is None or jid in taken:
                continue
            after = now[jid]
            if after != job:
                raise AssertionError(
                    f"L3 {what} changed job {jid} ({job.kind}, {job.state}) it did not "
                    f"lease: attempt {job.attempt} -> {getattr(after, 'attempt', None)}, "
                    f"run_after {job.run_after} -> {getattr(after, 'run_after', None)}"
                )
        self.ctx.stats.checks["L3 a job held back by a limit is unchanged"] += 1

    def _room(self, key: str, limit: Limit, jobs: Sequence[Job], now: float) -> bool:
        if limit.concurrency is not None:
            holding = sum(1 for j in jobs if j.state in HELD and key in job_keys(j))
            if holding >= limit.concurrency:
                return False
        if limit.rate is not None and limit.period is not None:
            recent = sum(
                1
                for j in jobs
                if key in job_keys(j)
                for t in lease_times(self.store.history(j.id))
                if t > now - limit.period
            )
            if recent >= limit.rate:
                return False
        return True

    def _check_fair(self, got: Sequence[Job], asked: int) -> None:
        now = self.clock.now()
        jobs = self._jobs()
        store = self.store
        assert isinstance(store, LimitsClaims)
        limits = store.limits()
        for job in jobs:
            if job.state not in self.sources or job.run_after > now:
                continue
            if job.deadline is not None and job.deadline <= now:
                continue
            if all(self._room(k, limits[k], jobs, now) for k in job_keys(job) if k in limits):
                raise AssertionError(
                    f"L4 a claim asked for {asked} and leased {len(got)}, leaving job {job.id} "
                    f"({job.kind}) behind though its kind and queue had room: a limited kind "
                    "blocked it"
                )
        self.ctx.stats.checks["L4 a limited kind never blocks another kind"] += 1

    def _limit_at(self, key: str) -> Callable[[float], int | None]:
        changes = self.concurrency.get(key, [])

        def at(t: float) -> int | None:
            found = [n for since, n in changes if since <= t]
            return found[-1] if found else None

        return at

    def _check_trails(self) -> None:
        trails = {jid: self.store.history(jid) for jid in self.ids}
        jobs = self._read(self.ids)
        by_key: dict[str, list[tuple[float, float]]] = {}
        leases: dict[str, list[float]] = {}
        for jid, trail in trails.items():
            job = jobs[jid]
            if job is None:
                continue
            for key in job_keys(job):
                by_key.setdefault(key, []).extend(holding_intervals(trail))
                leases.setdefault(key, []).extend(lease_times(trail))
            self.ctx.coverage.trail(trail)
        for key in self.concurrency:
            breaches = concurrency_breaches(by_key.get(key, []), self._limit_at(key))
            if breaches:
                t, holding, limit = breaches[0]
                raise AssertionError(
                    f"L1 {holding} jobs of {key} held a slot at {t} under a limit of {limit}"
                )
        self.ctx.stats.checks["L1 never more than N holding a slot of a limited key"] += 1
        # every key limited in rate, a kind's or the queue's: each lease of a job counts
        # against both its keys
        for key, (rate, period) in self.rates.items():
            breaches_r = rate_breaches(leases.get(key, []), rate, period)
            if breaches_r:
                t, n = breaches_r[0]
                raise AssertionError(
                    f"L2 {n} leases of {key} within {period} s from {t}, over its rate of {rate}"
                )
            self.ctx.stats.checks["L2 never more than R leases in a window of P"] += 1


def _by_key(jobs: Sequence[Job]) -> dict[str, int]:
    out: dict[str, int] = {}
    for job in jobs:
        for key in job_keys(job):
            out[key] = out.get(key, 0) + 1
    return out
