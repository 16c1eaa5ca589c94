"""The procrastinate app of the crash suite.

`procrastinate --app benchmarks.crash.procrastinate_app.app worker`.

Read from the environment per run:
- CRASH_PG_URL: the run's fresh database;
- CRASH_RECIPE: "1" adds the documented stalled-job retry recipe (a periodic task
  that retries `job_manager.get_stalled_jobs()`), with
- CRASH_RECIPE_CRON (6-field cron, seconds last), CRASH_STALLED_S
  (`seconds_since_heartbeat`), CRASH_HEARTBEAT_S (`update_heartbeat_interval`)
  and CRASH_PRUNE_S (`stalled_worker_timeout`); unset, procrastinate's defaults.
"""

from __future__ import annotations

import os
from typing import Any

import procrastinate

from benchmarks.crash import marks

PG_URL = os.environ.get("CRASH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RECIPE = os.environ.get("CRASH_RECIPE") == "1"
STALLED_S = float(os.environ.get("CRASH_STALLED_S", "30"))

worker_defaults: dict[str, Any] = {}
if "CRASH_HEARTBEAT_S" in os.environ:
    worker_defaults["update_heartbeat_interval"] = float(os.environ["CRASH_HEARTBEAT_S"])
if "CRASH_PRUNE_S" in os.environ:
    worker_defaults["stalled_worker_timeout"] = float(os.environ["CRASH_PRUNE_S"])

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=PG_URL),
    worker_defaults=worker_defaults or None,  # type: ignore[arg-type]
)


@app.task(name="crash_sleep", queue="crash")
def crash_sleep(marks_dir: str, seconds: float, effect: bool = False) -> None:
    marks.unfenced_job(marks_dir, seconds, effect)


if RECIPE:

    @app.periodic(cron=os.environ.get("CRASH_RECIPE_CRON", "*/10 * * * *"))
    @app.task(name="retry_stalled_jobs", queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context: procrastinate.JobContext, timestamp: int) -> None:
        stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_S)
        for job in stalled:
            await app.job_manager.retry_job(job)
