"""jobfsm: background jobs driven through one declarative, audited state machine.

`fsm.lifecycle` is the lifecycle core package (its `lifecycle()` loads the spec).

The names below load on first use (PEP 562): `import fsm` alone loads none of the
engine, the worker, asyncio or the telemetry, so a `jobfsm` command or a worker process
pays only for what it touches. Type checkers read the imports under `TYPE_CHECKING`;
`_EXPORTS` says, for the interpreter, which module defines each name of `__all__`
(tests/unit/test_lazy_exports.py holds the two lists together).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .clock import FakeClock, SystemClock
    from .errors import (
        Ambiguous,
        BadInput,
        BadStoreURL,
        DuplicateJob,
        HandlerOutcome,
        IllegalTransition,
        JobFSMError,
        JobNotFound,
        LeaseLost,
        MissingExtra,
        OperatorError,
        PayloadError,
        Permanent,
        QueueFull,
        Retry,
        SchemaError,
        SpecError,
        StoreError,
        TransientStoreError,
        UnknownKind,
        UnknownPrerequisite,
        VersionConflict,
        WaitTimeout,
    )
    from .handling.attempt import Context, JobCancelled
    from .inputs import KindPolicy, Unique
    from .lifecycle.core import decide, replay
    from .lifecycle.spec import Lifecycle, check_spec, load_spec
    from .policies import Backoff, LeasePolicy, Limits, Policy, RecoveryPolicy, RetryPolicy
    from .ports import (
        ClaimRequest,
        Clock,
        Delivery,
        Observer,
        PruneRequest,
        RenewRequest,
        ScanRequest,
        Store,
    )
    from .records import AuditEntry, Decision, Job, Owner, new_id
    from .registry import open_store
    from .service.aio import AsyncEngine
    from .service.engine import Engine
    from .service.identity import Identity, Verdict
    from .service.maintenance import RecoveryReport
    from .service.maintenance.retention import RetentionPlan
    from .telemetry.metrics import CountingMetrics, Metrics
    from .telemetry.observers import ObserverBase
    from .worker import Worker
    from .worker.handlers import Handlers, HandlerSpec

#: each public name -> the module (relative to this package) that defines it
_EXPORTS: dict[str, str] = {
    "FakeClock": ".clock",
    "SystemClock": ".clock",
    "Ambiguous": ".errors",
    "BadInput": ".errors",
    "BadStoreURL": ".errors",
    "DuplicateJob": ".errors",
    "HandlerOutcome": ".errors",
    "IllegalTransition": ".errors",
    "JobFSMError": ".errors",
    "JobNotFound": ".errors",
    "LeaseLost": ".errors",
    "MissingExtra": ".errors",
    "OperatorError": ".errors",
    "PayloadError": ".errors",
    "Permanent": ".errors",
    "QueueFull": ".errors",
    "Retry": ".errors",
    "SchemaError": ".errors",
    "SpecError": ".errors",
    "StoreError": ".errors",
    "TransientStoreError": ".errors",
    "UnknownKind": ".errors",
    "UnknownPrerequisite": ".errors",
    "VersionConflict": ".errors",
    "WaitTimeout": ".errors",
    "Context": ".handling.attempt",
    "JobCancelled": ".handling.attempt",
    "KindPolicy": ".inputs",
    "Unique": ".inputs",
    "decide": ".lifecycle.core",
    "replay": ".lifecycle.core",
    "Lifecycle": ".lifecycle.spec",
    "check_spec": ".lifecycle.spec",
    "load_spec": ".lifecycle.spec",
    "Backoff": ".policies",
    "LeasePolicy": ".policies",
    "Limits": ".policies",
    "Policy": ".policies",
    "RecoveryPolicy": ".policies",
    "RetryPolicy": ".policies",
    "ClaimRequest": ".ports",
    "Clock": ".ports",
    "Delivery": ".ports",
    "Observer": ".ports",
    "PruneRequest": ".ports",
    "RenewRequest": ".ports",
    "ScanRequest": ".ports",
    "Store": ".ports",
    "AuditEntry": ".records",
    "Decision": ".records",
    "Job": ".records",
    "Owner": ".records",
    "new_id": ".records",
    "open_store": ".registry",
    "AsyncEngine": ".service.aio",
    "Engine": ".service.engine",
    "Identity": ".service.identity",
    "Verdict": ".service.identity",
    "RecoveryReport": ".service.maintenance",
    "RetentionPlan": ".service.maintenance.retention",
    "CountingMetrics": ".telemetry.metrics",
    "Metrics": ".telemetry.metrics",
    "ObserverBase": ".telemetry.observers",
    "Worker": ".worker",
    "Handlers": ".worker.handlers",
    "HandlerSpec": ".worker.handlers",
}

__all__ = [
    "Ambiguous",
    "AsyncEngine",
    "AuditEntry",
    "Backoff",
    "BadInput",
    "BadStoreURL",
    "ClaimRequest",
    "Clock",
    "Context",
    "CountingMetrics",
    "Decision",
    "Delivery",
    "DuplicateJob",
    "Engine",
    "FakeClock",
    "HandlerOutcome",
    "HandlerSpec",
    "Handlers",
    "Identity",
    "IllegalTransition",
    "Job",
    "JobCancelled",
    "JobFSMError",
    "JobNotFound",
    "KindPolicy",
    "LeaseLost",
    "LeasePolicy",
    "Lifecycle",
    "Limits",
    "Metrics",
    "MissingExtra",
    "Observer",
    "ObserverBase",
    "OperatorError",
    "Owner",
    "PayloadError",
    "Permanent",
    "Policy",
    "PruneRequest",
    "QueueFull",
    "RecoveryPolicy",
    "RecoveryReport",
    "RenewRequest",
    "RetentionPlan",
    "Retry",
    "RetryPolicy",
    "ScanRequest",
    "SchemaError",
    "SpecError",
    "Store",
    "StoreError",
    "SystemClock",
    "TransientStoreError",
    "Unique",
    "UnknownKind",
    "UnknownPrerequisite",
    "Verdict",
    "VersionConflict",
    "WaitTimeout",
    "Worker",
    "check_spec",
    "decide",
    "load_spec",
    "new_id",
    "open_store",
    "replay",
]


def _load(name: str) -> object:
    """The public `name`, imported from its module on first use and kept here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all
    __getattr__ = _load
