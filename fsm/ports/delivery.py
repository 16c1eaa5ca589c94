"""Deliveries (how a worker learns of work) and cross-host liveness."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from ..records import Job, Owner


class Delivery(Protocol):
    """How a worker learns of work. Hints only: the store stays the truth."""

    def publish(self, jobs: Sequence[Job]) -> None:
        """Announce committed jobs. A failure is logged, never fatal: sweeps repair it."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Wakeup:
    """A hint that work may be there: a job id (RabbitMQ) or None ("claim any due job").

    `token` is the delivery's own handle (on RabbitMQ a delivery tag and its channel
    generation, or one part of a message that names several jobs); the worker hands
    it back to `settle` once the lease is durable.
    """

    job_id: str | None
    token: object = attrs.field(default=None, eq=False)


class WorkerDelivery(Delivery, Protocol):
    """The worker side of a delivery: wake-ups in, settlements out."""

    def start(self, queues: Sequence[str]) -> None: ...

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        """Block at most `timeout` seconds; return at most `capacity` wake-ups."""
        ...

    def settle(self, wakeup: Wakeup, claimed: bool = False) -> None:
        """The wake-up was handled (job leased durably, or not claimable): ack it.

        `claimed`: the worker leased the job it names, so the job certainly exists.
        """
        ...

    @property
    def ready(self) -> bool: ...

    def check(self) -> None:
        """Raise if the delivery failed for good (recovery budget exhausted)."""
        ...


class Liveness(Protocol):
    """Cross-host confirmation of death, where a store can give it (PostgreSQL)."""

    def hold(self, owner: Owner, on_lost: Callable[[], None]) -> None:
        """Take this process's liveness token; call `on_lost` if it is ever lost."""
        ...

    def release(self, owner: Owner) -> None: ...

    def probe(self, owner: Owner) -> str:
        """'dead' if the owner's token is provably free, 'alive' if held, else 'unknown'."""
        ...
