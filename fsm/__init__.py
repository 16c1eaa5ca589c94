"""jobfsm: background jobs driven through one declarative, audited state machine.

`fsm.lifecycle` is the lifecycle core package (its `lifecycle()` loads the spec).
"""

from __future__ import annotations

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
