"""The celery app of the crash suite (`celery -A benchmarks.crash.celery_app worker`).

Per run, from the environment: CRASH_AMQP_URL, CRASH_QUEUE (the run's own queue),
CRASH_ACKS_LATE and CRASH_REJECT_ON_WORKER_LOST ("1" or "0": `task_acks_late`,
`task_reject_on_worker_lost`, both False by default) and CRASH_HEARTBEAT
(`broker_heartbeat` in seconds; unset = celery's 120 s).
"""

from __future__ import annotations

import os

from celery import Celery

from benchmarks.crash import marks


def make_app(
    amqp_url: str,
    queue: str,
    *,
    acks_late: bool,
    reject_on_worker_lost: bool,
    heartbeat: float | None,
) -> Celery:
    app = Celery("crash", broker=amqp_url)
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=acks_late,
        task_reject_on_worker_lost=reject_on_worker_lost,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        result_backend=None,
    )
    if heartbeat is not None:
        app.conf.broker_heartbeat = heartbeat
    app.task(name="crash_sleep")(crash_sleep)
    return app


def crash_sleep(marks_dir: str, seconds: float, effect: bool = False) -> None:
    marks.unfenced_job(marks_dir, seconds, effect)


app = make_app(
    os.environ.get("CRASH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F"),
    os.environ.get("CRASH_QUEUE", "crash"),
    acks_late=os.environ.get("CRASH_ACKS_LATE") == "1",
    reject_on_worker_lost=os.environ.get("CRASH_REJECT_ON_WORKER_LOST") == "1",
    heartbeat=float(os.environ["CRASH_HEARTBEAT"]) if "CRASH_HEARTBEAT" in os.environ else None,
)
