"""procrastinate, dramatiq and celery in the crash suite: each worker runs through its own CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import broker
from benchmarks.crash import common
from benchmarks.harness import AMQP_URL, REPO, Config, Measurement, version_of
from benchmarks.runner import Workers
from benchmarks.services import fresh_database

PROCRASTINATE_DOC = (
    "https://procrastinate.readthedocs.io/en/stable/howto/production/retry_stalled_jobs.html"
)
CELERY_ACKS_DOC = "https://docs.celeryq.dev/en/stable/userguide/tasks.html#Task.acks_late"
CELERY_REJECT_DOC = (
    "https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-reject-on-worker-lost"
)
CELERY_FAQ = "https://docs.celeryq.dev/en/stable/faq.html#should-i-use-retry-or-acks-late"
DRAMATIQ_DOC = "https://dramatiq.io/best_practices.html"
RABBITMQ_HEARTBEATS = "https://www.rabbitmq.com/docs/heartbeats"


def _procrastinate_cli(*args: str) -> list[str]:
    """`python -m procrastinate` of the crash app: a worker's arguments (`Workers.start`)."""
    return ["procrastinate", "--app", "benchmarks.crash.procrastinate_app.app", *args]


def _amqp_url(heartbeat: float | None) -> str:
    if heartbeat is None:
        return AMQP_URL
    return f"{AMQP_URL}{'&' if '?' in AMQP_URL else '?'}heartbeat={int(heartbeat)}"


def _rabbit_fate(queues: list[str]) -> str:
    """Once every worker is gone (unacked deliveries requeued): a message left is stuck."""
    return "stuck" if any(broker.queue_depth(q) for q in queues) else "lost"


def _log_has(group: Workers, proc: subprocess.Popen[bytes], text: str) -> bool:
    return text in group.log(proc)


# --- procrastinate -------------------------------------------------------------------


class ProcrastinateSession:
    def __init__(self, url: str, group: Workers, env: dict[str, str]) -> None:
        self.url = url
        self.group = group
        self.env = {"CRASH_PG_URL": url, **env}

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        argv = _procrastinate_cli(
            "--verbose", "worker", "--name", f"crash-{index}", "--concurrency", "1"
        )
        return self.group.start(*argv, env=self.env)

    def ready(self, proc: subprocess.Popen[bytes]) -> bool:
        import psycopg

        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
        return bool(row and row[0] >= 2)

    def submit(self, payload: dict[str, Any]) -> None:
        args = {
            "marks_dir": payload["marks"],
            "seconds": payload["seconds"],
            "effect": payload["effect"],
        }
        subprocess.run(
            [sys.executable, "-m", *_procrastinate_cli("defer", "crash_sleep", json.dumps(args))],
            env=_env(self.env),
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=60,
        )

    def fate(self) -> str:
        import psycopg

        with psycopg.connect(self.url) as conn:
            row = conn.execute(
                "SELECT status FROM procrastinate_jobs WHERE task_name = 'crash_sleep'"
            ).fetchone()
        status = row[0] if row else None
        if status in (None, "failed", "cancelled", "aborted"):
            return "lost"
        return "stuck" if status == "doing" else "waiting"


def _env(extra: dict[str, str]) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), **extra)


def procrastinate_system(env: dict[str, str]) -> common.System:
    @contextmanager
    def session(
        folder: Path, group: Workers, sizes: common.Sizes
    ) -> Iterator[ProcrastinateSession]:
        with fresh_database() as url:
            full = {"CRASH_PG_URL": url, **env}
            subprocess.run(
                [sys.executable, "-m", *_procrastinate_cli("schema", "--apply")],
                env=_env(full),
                cwd=REPO,
                check=True,
                capture_output=True,
                timeout=120,
            )
            try:
                yield ProcrastinateSession(url, group, env)
            finally:
                group.stop()

    return session


def procrastinate(cfg: Config, recipe: bool) -> Measurement:
    sizes = common.Sizes.of(cfg)
    version = version_of("procrastinate")
    if not recipe:
        settings: dict[str, Any] = {
            "version": version,
            "retry_stalled_jobs": "not configured (default)",
        }
        return common.measure_kill(
            "recovery.procrastinate.default",
            label="procrastinate, kill -9, nothing configured",
            system=procrastinate_system({}),
            sizes=sizes,
            tmp=cfg.tmp,
            settings={**settings, "fresh_worker": "already started and ready"},
            note=(
                "A worker killed with SIGKILL leaves its jobs in `doing`, and without a "
                f"stalled-jobs task they stay there forever and never resume ({PROCRASTINATE_DOC})."
            ),
        )
    # Its stalled-jobs recipe tuned for fast recovery, in the quick and the full run
    # alike: heartbeat every 1 s, stalled after 3 s, checked every second (its defaults,
    # heartbeats every 10 s and stalled after 30 s, recover in about 37 s).
    cron, stalled, heartbeat, prune = "* * * * * *", 3.0, 1.0, 3.0
    env = {
        "CRASH_RECIPE": "1",
        "CRASH_RECIPE_CRON": cron,
        "CRASH_STALLED_S": str(stalled),
        "CRASH_HEARTBEAT_S": str(heartbeat),
        "CRASH_PRUNE_S": str(prune),
    }
    settings = {
        "version": version,
        "retry_stalled_jobs": f"periodic task, cron '{cron}', every second "
        "(docs' example: '*/10 * * * *', every 10 min)",
        "seconds_since_heartbeat": stalled,
        "update_heartbeat_interval": heartbeat,
        "stalled_worker_timeout": prune,
        "fresh_worker": "already started and ready",
    }
    return common.measure_kill(
        "recovery.procrastinate.recipe",
        label="procrastinate, kill -9, stalled-jobs retry recipe",
        system=procrastinate_system(env),
        sizes=sizes,
        tmp=cfg.tmp,
        settings=settings,
        note=(
            "A periodic task retries the `doing` jobs of workers whose heartbeat is older "
            "than seconds_since_heartbeat; tuned here to a 1 s heartbeat, stalled after 3 s, "
            "checked every second (defaults: 30 s, heartbeats every 10 s, about 37 s to "
            f"recover) ({PROCRASTINATE_DOC})."
        ),
    )


# --- dramatiq and celery (RabbitMQ) --------------------------------------------------


class RabbitSession:
    def __init__(self, group: Workers, queue: str, env: dict[str, str], peer: str) -> None:
        self.group = group
        self.queue = queue
        self.env = env
        self.peer = peer

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        if self.peer == "dramatiq":
            argv = ["dramatiq", "benchmarks.crash.dramatiq_app"]
            argv += ["--processes", "1", "--threads", "1", "--queues", self.queue]
        else:
            argv = ["celery", "-A", "benchmarks.crash.celery_app", "worker"]
            argv += ["-Q", self.queue, "-c", "1", "--pool", "prefork", "--loglevel", "INFO"]
            argv += ["-n", f"crash{index}-{self.queue}@%h", "--without-gossip", "--without-mingle"]
            argv += ["--without-heartbeat"]
        return self.group.start(*argv, env=self.env)

    def ready(self, proc: subprocess.Popen[bytes]) -> bool:
        text = "Worker process is ready for action." if self.peer == "dramatiq" else " ready."
        return _log_has(self.group, proc, text)

    def submit(self, payload: dict[str, Any]) -> None:
        kwargs = {
            "marks_dir": payload["marks"],
            "seconds": payload["seconds"],
            "effect": payload["effect"],
        }
        if self.peer == "dramatiq":
            import dramatiq
            from dramatiq.brokers.rabbitmq import RabbitmqBroker

            broker = RabbitmqBroker(url=AMQP_URL)
            try:
                broker.declare_queue(self.queue)
                broker.enqueue(
                    dramatiq.Message(
                        queue_name=self.queue,
                        actor_name="crash_sleep",
                        args=(),
                        kwargs=kwargs,
                        options={},
                    )
                )
            finally:
                broker.close()
        else:
            from benchmarks.crash.celery_app import make_app

            app = make_app(
                AMQP_URL, self.queue, acks_late=False, reject_on_worker_lost=False, heartbeat=None
            )
            try:
                app.send_task("crash_sleep", kwargs=kwargs, queue=self.queue)
            finally:
                app.close()

    def queues(self) -> list[str]:
        if self.peer == "dramatiq":
            return [self.queue, f"{self.queue}.DQ", f"{self.queue}.XQ"]
        return [self.queue]

    def fate(self) -> str:
        return _rabbit_fate([self.queue])


def rabbit_system(peer: str, env: dict[str, str]) -> common.System:
    @contextmanager
    def session(folder: Path, group: Workers, sizes: common.Sizes) -> Iterator[RabbitSession]:
        queue = f"crash_{peer}_{uuid.uuid4().hex[:10]}"
        s = RabbitSession(group, queue, {"CRASH_QUEUE": queue, **env}, peer)
        try:
            yield s
        finally:
            group.stop()
            broker.delete(s.queues(), [queue] if peer == "celery" else [])

    return session


def dramatiq(cfg: Config) -> Measurement:
    return common.measure_kill(
        "recovery.dramatiq.default",
        label="dramatiq RabbitmqBroker, kill -9 of the worker process running the job",
        system=rabbit_system("dramatiq", {"CRASH_AMQP_URL": AMQP_URL}),
        sizes=common.Sizes.of(cfg),
        tmp=cfg.tmp,
        settings={
            "version": version_of("dramatiq"),
            "broker": "RabbitmqBroker (defaults)",
            "acks": "after the actor returns (not configurable)",
            "processes": 1,
            "threads": 1,
            "killed": "the worker child process running the actor",
            "fresh_worker": "another `dramatiq` already started and ready",
        },
        note=(
            "Dramatiq actors may receive the same message more than once after a worker "
            "failure: delivery is at-least-once (messages are acked after the actor runs), "
            f"so actors must be idempotent ({DRAMATIQ_DOC})."
        ),
    )


def celery(cfg: Config, acks_late: bool, reject: bool = False) -> Measurement:
    env = {
        "CRASH_AMQP_URL": AMQP_URL,
        "CRASH_ACKS_LATE": "1" if acks_late else "0",
        "CRASH_REJECT_ON_WORKER_LOST": "1" if reject else "0",
    }
    if not acks_late:
        key, label = (
            "recovery.celery.acks_early",
            "celery, kill -9 of the pool child, defaults (acks early)",
        )
        note = (
            "By default the message is acknowledged just before the task runs, so a task whose "
            f"worker dies mid-run is not redelivered ({CELERY_ACKS_DOC})."
        )
    elif not reject:
        key, label = (
            "recovery.celery.acks_late",
            "celery, kill -9 of the pool child, task_acks_late=True",
        )
        note = (
            "The FAQ offers acks_late for tasks that must run again if the worker crashes "
            f"mid-execution ({CELERY_FAQ}), but the worker acknowledges the message when the "
            "child process executing the task is killed, unless task_reject_on_worker_lost=True "
            f"({CELERY_ACKS_DOC}; {CELERY_REJECT_DOC})."
        )
    else:
        key = "recovery.celery.acks_late_reject"
        label = "celery, kill -9 of the pool child, acks_late + reject_on_worker_lost"
        note = (
            "With task_reject_on_worker_lost=True the message of a killed child is re-queued "
            f"and runs again, by the same worker or another ({CELERY_REJECT_DOC})."
        )
    return common.measure_kill(
        key,
        label=label,
        system=rabbit_system("celery", env),
        sizes=common.Sizes.of(cfg),
        tmp=cfg.tmp,
        settings={
            "version": version_of("celery"),
            "task_acks_late": acks_late,
            "task_reject_on_worker_lost": reject,
            "worker_pool": "prefork, concurrency 1",
            "killed": "the pool child process running the task (its parent stays up)",
            "fresh_worker": "another `celery worker` already started and ready "
            "(and the parent's new child)",
        },
        note=note,
    )


def zombie(cfg: Config, peer: str) -> Measurement:
    heartbeat = 2.0 if cfg.quick else 10.0
    # the broker notices a frozen connection after about two missed heartbeats
    sizes = common.Sizes.of(cfg, bound=max(cfg.recovery_wait, 4 * heartbeat + 10.0))
    if peer == "dramatiq":
        env = {"CRASH_AMQP_URL": _amqp_url(heartbeat)}
        settings: dict[str, Any] = {
            "version": version_of("dramatiq"),
            "broker": "RabbitmqBroker",
            "amqp_heartbeat_s": heartbeat,
            "amqp_heartbeat_default": "negotiated with the server: 60 s on RabbitMQ",
        }
    else:
        env = {
            "CRASH_AMQP_URL": AMQP_URL,
            "CRASH_ACKS_LATE": "1",
            "CRASH_REJECT_ON_WORKER_LOST": "0",
            "CRASH_HEARTBEAT": str(heartbeat),
        }
        settings = {
            "version": version_of("celery"),
            "task_acks_late": True,
            "broker_heartbeat_s": heartbeat,
            "broker_heartbeat_default_s": 120,
        }
    settings.update(
        effect="unfenced (a mark file per committed effect)",
        frozen="the whole worker (SIGSTOP to its process group)",
    )
    return common.measure_zombie(
        f"recovery.{peer}.zombie",
        label=f"{peer}, SIGSTOP then SIGCONT (zombie), unfenced effect",
        system=rabbit_system(peer, env),
        sizes=sizes,
        tmp=cfg.tmp,
        settings=settings,
        note=(
            "RabbitMQ requeues the unacked message once the frozen connection misses its "
            "heartbeats and another worker runs it; the woken worker still finishes its copy: "
            "delivery is at-least-once and nothing fences the stale run "
            f"({RABBITMQ_HEARTBEATS})."
        ),
    )
