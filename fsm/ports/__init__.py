"""The ports: small protocols that stores, deliveries, executors, clocks and observers
implement. Ports speak of jobs, not queries.

- `store`: the Store and the requests it is given (claim, renew, progress, scan, prune);
- `capabilities`: what a store may also do, declared as protocols and checked with
  `isinstance` (pausing queues, dependencies, schedules, transactional submit, ...);
- `delivery`: how a worker learns of work, and cross-host liveness;
- `executor`: attempts, their outcomes, and the pools that run them;
- `observer`: the one event contract (transitions, attempts, recoveries, ...);
- `async_store`: the asyncio twin of a store;
- `browser`: the job list, recent transition counts and bounded reads the dashboard
  makes;
- `history`: the dashboard's history charts, grouped counts over the audit trail.

Everything is importable from `fsm.ports` itself.
"""

from __future__ import annotations

from .async_store import (
    AsyncJoinsTransactions,
    AsyncStore,
    HasAsyncStore,
)
from .browser import (
    MAX_PAGE,
    MAX_QUEUES,
    MAX_RECENT_ENTRIES,
    MAX_TEXT,
    MAX_TRAIL_PAGE,
    BoundedReads,
    JobBrowser,
    JobPage,
    ListRequest,
    RecentEntries,
    RecentRequest,
    TrailPage,
    TrailRequest,
    TransitionCount,
    check_queues,
    page_of,
    trail_of,
)
from .capabilities import (
    SCHEDULE_ACTIONS,
    ConfirmsDeath,
    CountsPrunes,
    Erasable,
    HoldsSchedules,
    JoinsTransactions,
    LeasesServices,
    LimitsClaims,
    Migratable,
    NotesScheduleChanges,
    PausesQueues,
    QueuePause,
    ScheduleChange,
    SchedulerBeat,
    ScheduleRecord,
    SchemaDroppable,
    ServiceLease,
    StoresProgress,
    TracksDependencies,
    WaitsForJobs,
    Wakeable,
    WatchesJobs,
    WrapsConnections,
)
from .delivery import (
    Delivery,
    Liveness,
    Wakeup,
    WorkerDelivery,
)
from .executor import (
    OUTCOMES,
    Attempt,
    CancelToken,
    Executor,
    ExecutorFull,
    Outcome,
)
from .history import (
    EventCount,
    History,
    HistoryCounts,
    HistoryRequest,
    LatencyCount,
)
from .observer import (
    Observer,
)
from .store import (
    Capacity,
    ClaimRequest,
    Clock,
    ProgressRequest,
    PruneRequest,
    RenewRequest,
    ScanRequest,
    Store,
)

__all__ = [
    "MAX_PAGE",
    "MAX_QUEUES",
    "MAX_RECENT_ENTRIES",
    "MAX_TEXT",
    "MAX_TRAIL_PAGE",
    "OUTCOMES",
    "SCHEDULE_ACTIONS",
    "AsyncJoinsTransactions",
    "AsyncStore",
    "Attempt",
    "BoundedReads",
    "CancelToken",
    "Capacity",
    "ClaimRequest",
    "Clock",
    "ConfirmsDeath",
    "CountsPrunes",
    "Delivery",
    "Erasable",
    "EventCount",
    "Executor",
    "ExecutorFull",
    "HasAsyncStore",
    "History",
    "HistoryCounts",
    "HistoryRequest",
    "HoldsSchedules",
    "JobBrowser",
    "JobPage",
    "JoinsTransactions",
    "LatencyCount",
    "LeasesServices",
    "LimitsClaims",
    "ListRequest",
    "Liveness",
    "Migratable",
    "NotesScheduleChanges",
    "Observer",
    "Outcome",
    "PausesQueues",
    "ProgressRequest",
    "PruneRequest",
    "QueuePause",
    "RecentEntries",
    "RecentRequest",
    "RenewRequest",
    "ScanRequest",
    "ScheduleChange",
    "ScheduleRecord",
    "SchedulerBeat",
    "SchemaDroppable",
    "ServiceLease",
    "Store",
    "StoresProgress",
    "TracksDependencies",
    "TrailPage",
    "TrailRequest",
    "TransitionCount",
    "WaitsForJobs",
    "Wakeable",
    "Wakeup",
    "WatchesJobs",
    "WorkerDelivery",
    "WrapsConnections",
    "check_queues",
    "page_of",
    "trail_of",
]
