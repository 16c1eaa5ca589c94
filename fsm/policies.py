"""Retry, lease and recovery policies. Every bound is explicit (docs/reliability.md)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

import attrs

from .jsonio import DEFAULT_MAX_PAYLOAD_BYTES


def _positive(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _non_negative_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _positive_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class Backoff:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * factor**(n-1)))."""

    base: float = attrs.field(default=1.0, validator=_positive)
    factor: float = attrs.field(default=2.0, validator=_positive)
    cap: float = attrs.field(default=3600.0, validator=_positive)
    jitter: bool = True

    def ceiling(self, attempt: int) -> float:
        exponent = max(attempt - 1, 0)
        # Compare in log space first so a huge attempt count cannot overflow.
        if exponent > 64:
            return self.cap
        return float(min(self.cap, self.base * self.factor**exponent))

    def delay(self, attempt: int, draw: float) -> float:
        """The delay before retry `attempt + 1`; `draw` in [0, 1) picks the jitter."""
        top = self.ceiling(attempt)
        return draw * top if self.jitter else top


@attrs.frozen
class RetryPolicy:
    max_attempts: int = attrs.field(default=10, validator=_positive_int)
    backoff: Backoff = attrs.field(factory=Backoff)


@attrs.frozen
class LeasePolicy:
    """A lease lasts `ttl` seconds and is renewed every `heartbeat_interval` seconds."""

    ttl: float = attrs.field(default=30.0, validator=_positive)
    heartbeat_interval: float = attrs.field(default=5.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.ttl < 2 * self.heartbeat_interval:
            raise ValueError(
                f"lease ttl ({self.ttl}s) must be at least twice the heartbeat interval "
                f"({self.heartbeat_interval}s), or one late heartbeat loses the lease"
            )


@attrs.frozen
class RecoveryPolicy:
    """At most `max_recoveries` crash recoveries per job; then investigate."""

    max_recoveries: int = attrs.field(default=3, validator=_non_negative_int)
    sweep_interval: float = attrs.field(default=1.0, validator=_positive)


DEFAULT_RETENTION: Mapping[str, float | None] = {
    "succeeded": 7 * 86400.0,
    "cancelled": 7 * 86400.0,
    "failed": None,  # kept until an operator handles it
    "investigate": None,
}


@attrs.frozen
class Limits:
    """Size and time bounds that are not about retrying."""

    max_payload_bytes: int = attrs.field(default=DEFAULT_MAX_PAYLOAD_BYTES, validator=_positive_int)
    attempt_timeout: float = attrs.field(default=1800.0, validator=_positive)
    shutdown_grace: float = attrs.field(default=30.0, validator=_positive)
    #: queue name -> capacity (queued + retry_wait); absent means unbounded.
    queue_capacity: Mapping[str, int] = attrs.field(factory=dict)
    retention: Mapping[str, float | None] = attrs.field(factory=lambda: dict(DEFAULT_RETENTION))
    #: queue name -> state -> seconds kept (None: until handled), over `retention` for
    #: that queue's jobs: `{"audit-log": {"succeeded": 90 * 86400.0}}`
    queue_retention: Mapping[str, Mapping[str, float | None]] = attrs.field(factory=dict)
    #: bounded retries of a compare-and-set that lost a race with another writer.
    cas_retries: int = attrs.field(default=8, validator=_positive_int)


@attrs.frozen
class Policy:
    """Everything `decide` needs besides the record, the event and the time."""

    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    lease: LeasePolicy = attrs.field(factory=LeasePolicy)
    recovery: RecoveryPolicy = attrs.field(factory=RecoveryPolicy)
    limits: Limits = attrs.field(factory=Limits)
    #: seed of the backoff jitter; fix it for reproducible schedules (tests, fault suites).
    seed: int = attrs.field(factory=lambda: random.SystemRandom().getrandbits(64), repr=False)

    @classmethod
    def seeded(cls, seed: int, **kwargs: object) -> Policy:
        return cls(seed=seed, **kwargs)  # type: ignore[arg-type]

    def jitter(self, job_id: str, attempt: int) -> float:
        """A draw in [0, 1) for a job's retry after `attempt`: a pure function of the
        seed, the job and the attempt, so `decide` stays pure and jobs spread out."""
        digest = hashlib.blake2b(f"{self.seed}:{job_id}:{attempt}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64
