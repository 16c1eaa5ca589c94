"""Running a handler: the room below the worker that executors (adapters) may import.

Reading order: `attempt` (what a handler sees, `Context`, and how its exit becomes an
`Outcome`, the same in a worker thread and in an executor's child), then `child`
(what a process executor's child runs, and the mark messages it trades with its
parent). Applications import `Context` from `fsm` (or `fsm.worker.context`).
"""
