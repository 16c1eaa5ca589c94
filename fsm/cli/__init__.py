"""The `jobfsm` command line: `cli`, the root click group, with every command added here.

Reading order:
- `root`: the group and `main` (the console script; errors become one line there)
- `options`, `connect`, `output`, `logsetup`, `selection`: what the commands share
  (options, the Engine over --store, --json output, log set-up, job filters)
- one module per command or group of commands (`*_cmd`); none imports this package,
  and this package adds their commands to `cli`
- `docgen`: docs/cli.md and the diagrams, generated from the CLI and the spec

How values are shown (times, ages, escaped text, tables) lives in `fsm.display`,
shared with the dashboard and the demo.
"""

from __future__ import annotations

from . import (
    dashboard_cmd,
    demo_cmd,
    diagram_cmd,
    faults_cmd,
    limits_cmd,
    operator_cmd,
    read_cmd,
    recover_cmd,
    schedules_cmd,
    spec_cmd,
    store_cmd,
    submit_cmd,
    worker_cmd,
)
from .root import cli, main

__all__ = ["cli", "main"]

for _command in (  # `--help` lists them sorted by name, whatever the order here
    dashboard_cmd.dashboard,
    demo_cmd.demo,
    diagram_cmd.diagram,
    faults_cmd.faults,
    limits_cmd.limits,
    operator_cmd.cancel,
    operator_cmd.erase,
    operator_cmd.pause,
    operator_cmd.requeue,
    operator_cmd.resolve,
    operator_cmd.resume,
    read_cmd.history,
    read_cmd.inspect,
    read_cmd.list_jobs,
    read_cmd.show,
    read_cmd.status,
    recover_cmd.recover,
    schedules_cmd.schedules,
    spec_cmd.spec,
    store_cmd.migrate,
    store_cmd.prune,
    submit_cmd.submit,
    worker_cmd.worker,
):
    cli.add_command(_command)
del _command
