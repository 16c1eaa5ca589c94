"""`jobfsm demo`: a realistic workload over real worker processes, with injected crashes.

- `effects`: the fenced effects ledger the demo handlers write (at most one commit per job)
- `app`: the demo's job kinds and handlers (`fsm.demo.app:handlers`)
- `worker`: the entry point of one demo worker process
- `run`: the driver: submit, spawn, crash, watch, check the invariants, summarize
"""

from __future__ import annotations
