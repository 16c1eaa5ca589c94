"""Flow control: the one rule of what a claim may lease under limits (docs/flow-control.md).

A limit caps the jobs of one kind (key `kind:NAME`) or one queue (`queue:NAME`):
`concurrency` jobs holding a lease at once (leased, running or cancelling), and/or
`rate` leases in any window of `period` seconds. Every store's claim reads the limits
that apply, counts what holds a slot and what was leased within the window, and asks
`Budget` which candidates it may lease now, in the same transaction as the leases.

Pure: the stores count, this decides. A candidate held back stays where it is (queued,
its `run_after` unchanged, no attempt charged) and the claim goes on to the jobs behind
it, so a limited kind never blocks the other kinds of its queue.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ..errors import BadInput
from ..inputs import check_name
from ..records import Job

#: what a limit applies to: the jobs of a kind, or the jobs of a queue
SCOPES = ("kind", "queue")
#: the shortest rate period (seconds): a shorter one is a typo, not a limit
MIN_PERIOD = 0.001
#: the largest concurrency or rate (a store column is a signed 64-bit integer)
MAX_COUNT = 2**63 - 1
#: where a limit was declared: by an operator (`jobfsm limits set`) or in code
ORIGINS = ("operator", "code")


@attrs.frozen
class Limit:
    """A global limit as the store keeps it (`key` is `kind:NAME` or `queue:NAME`)."""

    key: str
    concurrency: int | None = None
    rate: int | None = None
    period: float | None = None
    origin: str = "operator"
    actor: str = ""
    reason: str = ""
    at: float = 0.0

    @property
    def scope(self) -> str:
        return self.key.partition(":")[0]

    @property
    def name(self) -> str:
        return self.key.partition(":")[2]

    def describe(self) -> str:
        """`5 running, 50 per 1s` (what the limit allows, for status and logs)."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} running")
        if self.rate is not None and self.period is not None:
            parts.append(f"{self.rate} per {self.period:g}s")
        return ", ".join(parts) or "none"


@attrs.frozen
class LimitChange:
    """One audited change of a limit (`before`/`after`: `Limit.describe`, None if none)."""

    seq: int
    key: str
    at: float
    actor: str
    reason: str
    origin: str
    before: str | None
    after: str | None


def limit_key(scope: str, name: str) -> str:
    """`kind:NAME` / `queue:NAME`; a BadInput names a bad scope or name."""
    if scope not in SCOPES:
        raise BadInput(f"a limit applies to a kind or a queue, not {scope!r}")
    return f"{scope}:{check_name(scope, name)}"


def parse_key(key: object) -> tuple[str, str]:
    """(scope, name) of `kind:NAME` / `queue:NAME`; a BadInput says what is wrong."""
    if not isinstance(key, str) or ":" not in key:
        raise BadInput(f"a limit key is 'kind:NAME' or 'queue:NAME'; got {key!r:.80}")
    scope, _, name = key.partition(":")
    return scope, limit_key(scope, name).partition(":")[2]


def _count(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what} must be a positive integer; got {value!r:.80}")
    if not 1 <= value <= MAX_COUNT:
        raise BadInput(f"{what} must be a positive integer; got {value!r:.80}")
    return value


def checked(
    key: str,
    *,
    concurrency: object = None,
    rate: object = None,
    period: object = None,
    origin: str = "operator",
    actor: str = "",
    reason: str = "",
    at: float = 0.0,
) -> Limit:
    """A `Limit` whose every value was checked: a positive integer concurrency and/or a
    positive integer rate per period of at least MIN_PERIOD finite seconds. Anything
    else is a BadInput naming the value; nothing is stored."""
    parse_key(key)
    if origin not in ORIGINS:
        raise BadInput(f"a limit's origin is one of {ORIGINS}; got {origin!r:.80}")
    if concurrency is None and rate is None:
        raise BadInput(f"limit {key}: give a concurrency, a rate and period, or both")
    conc = None if concurrency is None else _count(f"limit {key}: concurrency", concurrency)
    rate_n = None if rate is None else _count(f"limit {key}: rate", rate)
    secs: float | None = None
    if (rate is None) != (period is None):
        raise BadInput(f"limit {key}: a rate needs a period and a period a rate")
    if period is not None:
        if isinstance(period, bool) or not isinstance(period, int | float):
            raise BadInput(f"limit {key}: period must be a number of seconds; got {period!r:.80}")
        try:
            finite = math.isfinite(period)
        except OverflowError:
            finite = False
        if not finite or period < MIN_PERIOD:
            raise BadInput(
                f"limit {key}: period must be finite and at least {MIN_PERIOD} s "
                f"(1 ms); got {period!r:.80}"
            )
        secs = float(period)
    return Limit(key, conc, rate_n, secs, origin, actor, reason, at)


def job_keys(job: Job) -> tuple[str, str]:
    """The limit keys a job counts against: its kind's and its queue's."""
    return (f"kind:{job.kind}", f"queue:{job.queue}")


def applicable(
    limits: Mapping[str, Limit], queues: Sequence[str], kinds: Sequence[str] | None
) -> list[Limit]:
    """The limits a claim of `queues` (and `kinds`, None: any) must respect, by key."""
    out = []
    for key in sorted(limits):
        scope, _, name = key.partition(":")
        if (scope == "queue" and name in queues) or (
            scope == "kind" and (kinds is None or name in kinds)
        ):
            out.append(limits[key])
    return out


def window_start(limit: Limit, now: float) -> float | None:
    """Leases after this time count against `limit`'s rate (None: no rate). A lease at
    `now` is allowed when fewer than `rate` leases are later than `now - period`, which
    keeps every window of `period` seconds at `rate` leases or fewer."""
    if limit.rate is None or limit.period is None:
        return None
    return now - limit.period


def allowance(limit: Limit, held: int, recent: int) -> int:
    """How many more leases `limit` allows now: `held` jobs hold a slot of its key and
    `recent` were leased since `window_start`. Never negative: a limit lowered below
    the jobs already running lets them finish and grants nothing until below."""
    room = MAX_COUNT
    if limit.concurrency is not None:
        room = min(room, limit.concurrency - held)
    if limit.rate is not None:
        room = min(room, limit.rate - recent)
    return max(0, room)


class Budget:
    """The leases one claim may still grant, by limit key (keys absent: unlimited)."""

    def __init__(self, remaining: Mapping[str, int]) -> None:
        self.remaining = dict(remaining)

    @classmethod
    def of(
        cls,
        limits: Iterable[Limit],
        held: Mapping[str, int],
        recent: Mapping[str, int],
        caps: Mapping[str, int] | None = None,
    ) -> Budget:
        """The budget from each limit's counts, and a worker's own `caps` (per key:
        how many more it takes on, `jobfsm worker --limit`)."""
        remaining = {
            lim.key: allowance(lim, held.get(lim.key, 0), recent.get(lim.key, 0)) for lim in limits
        }
        for key, cap in (caps or {}).items():
            remaining[key] = max(0, min(remaining.get(key, cap), cap))
        return cls(remaining)

    def blocked(self, scope: str) -> list[str]:
        """Names of `scope` ("kind" or "queue") whose budget is spent, sorted."""
        prefix = f"{scope}:"
        return sorted(
            k[len(prefix) :] for k, n in self.remaining.items() if n <= 0 and k.startswith(prefix)
        )

    def admit(self, candidates: Iterable[Job], wanted: int) -> tuple[list[Job], int]:
        """The candidates (in lease order) to lease, at most `wanted`, each within the
        budget of its kind and its queue (spent as they are admitted), and how many
        were held back by a limit (they stay where they are)."""
        admitted: list[Job] = []
        held_back = 0
        for job in candidates:
            if len(admitted) >= wanted:
                break
            keys = [k for k in job_keys(job) if k in self.remaining]
            if any(self.remaining[k] <= 0 for k in keys):
                held_back += 1
                continue
            for k in keys:
                self.remaining[k] -= 1
            admitted.append(job)
        return admitted, held_back
