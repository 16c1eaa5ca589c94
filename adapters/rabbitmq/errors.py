"""Errors of the RabbitMQ delivery, rooted in jobfsm's one base class."""

from __future__ import annotations

from fsm.errors import JobFSMError


class DeliveryFailed(JobFSMError):
    """The delivery stopped for good: unrecoverable broker error or recovery budget spent.

    `check()` and `poll()` raise it, so a worker exits non-zero instead of
    staying alive while consuming nothing.
    """


class PublishFailed(JobFSMError):
    """A wake-up could not be published (unroutable, nacked, or the broker is gone).

    The job itself is committed and queued; the repair sweep republishes it.
    """
