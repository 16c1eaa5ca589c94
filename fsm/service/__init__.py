"""The service: the engine and its satellites, over one kernel.

Read in this order:

- `kernel`: the frozen value every plan and service takes (store, clock, policy,
  lifecycle, kinds, observers, publisher), and the one write path of decisions, which
  tells the observers of every transition;
- `plans`: the read-decide-write loops, written once as generators of requests, and
  `drive` / `adrive`, which run them; `drivers`: the performers that answer the
  requests from a blocking store or an asyncio twin;
- `engine`: `Engine`, the blocking driver; `aio`: `AsyncEngine`, the awaited one;
- `writes`: a plan run against the kernel's store, a decision on a record as read;
- `leasing` (claims, renewals, progress writes) and `batches` (a worker's reports);
- `dependencies` (releasing waiting jobs), `waiting` (`wait`), `pausing` (paused
  queues), `reconcile` (asking the outside system about a lost run), `schedules`
  (periodic jobs), `progress` (a running job's stored progress), `identity` (who this
  process is, and whether an owner is alive);
- `maintenance/`: the small services a worker runs on a timer (rescue, lost runs,
  deadlines, release, ticks, retention).

Nothing here imports the worker, the CLI, the dashboard or an adapter; the layers are
import-linter contracts in pyproject.toml.
"""
