"""Machine-readable output (`--json`): records as plain JSON-able data, one document
on stdout."""

from __future__ import annotations

import json
from typing import Any

import attrs
import click

from ..records import AuditEntry, Job
from ..service.progress import progress_of


def emit_json(value: Any) -> None:
    # ensure_ascii: control characters in stored text are written as \u escapes
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def job_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-able data (payload and result decoded)."""
    data = attrs.asdict(job, recurse=False)
    data["owner"] = None if job.owner is None else job.owner.to_dict()
    data["payload"] = job.payload
    data["result"] = job.result
    progress = progress_of(job)
    data["progress"] = None if progress is None else attrs.asdict(progress)
    del data["payload_json"], data["result_json"], data["progress_json"]
    return data


def entry_dict(entry: AuditEntry) -> dict[str, Any]:
    """An audit entry as plain JSON-able data (its data decoded)."""
    data = attrs.asdict(entry, recurse=False)
    data["data"] = entry.data
    del data["data_json"]
    return data
