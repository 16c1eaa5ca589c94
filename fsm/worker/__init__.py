"""The worker runtime: a thin orchestrator (`main.Worker`) and one module per role.

Read in this order: `main` (the orchestrator and the shutdown order), `state`
(what the roles share), `runs` (attempts in flight, keyed by job id and fence),
`claims`, `reports`, `leases`, `sweeper`; `handlers` (the registry of kinds and
their policies), `hooks` (set-up and clean-up) and `context` (what a handler sees,
and how its exit becomes an outcome) are what a service's own code touches.
"""

from __future__ import annotations

from ..handling.attempt import Context, Handler, JobCancelled
from .claims import BATCH_WINDOW
from .handlers import Handlers, HandlerSpec
from .hooks import HookFailed, Hooks
from .leases import DEFAULT_CANCEL_GRACE
from .main import DEFAULT_CONCURRENCY, DEFAULT_POLL_INTERVAL, Worker
from .reports import DEFAULT_REPORT_BATCH

__all__ = [
    "BATCH_WINDOW",
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_REPORT_BATCH",
    "Context",
    "Handler",
    "HandlerSpec",
    "Handlers",
    "HookFailed",
    "Hooks",
    "JobCancelled",
    "Worker",
]
