"""The systems of the latency suite: each started with idle workers, ready to be sent jobs.

A system is a context manager, `open(folder, stamps)`: it makes its own store or
queue, starts one worker process whose handler stamps its start into `stamps`
(`benchmarks.stamps`), waits until that worker is ready (LISTENing, consuming, or
past its first claim), and yields a `Client`: `client()` gives each submitting
thread its `submit(n)`, which returns once job `n` is committed (jobfsm, procrastinate)
or sent (dramatiq and celery, whose sends are not confirmed by default). Leaving the
context stops the worker and removes what the run made.

Every peer runs its documented low-latency setting, named in its `settings`:
procrastinate's LISTEN/NOTIFY, dramatiq's defaults (its consumer is pushed messages,
prefetch threads x 2), celery's defaults (prefetch multiplier 4, early acks).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import broker, runner
from benchmarks.harness import AMQP_URL, version_of
from benchmarks.noop import QUEUE_ENV
from benchmarks.services import fresh_store_url
from benchmarks.stamps import STAMPS_ENV

CONCURRENCY = 8  # handler slots of each system's one worker process (dramatiq's default)
POLL_INTERVAL = 0.05  # s: the polling-only rows (SQLite; PostgreSQL with LISTEN off)
DEFAULT_POLL = 1.0  # s: jobfsm's default, kept where a notification wakes the worker

Submit = Callable[[int], None]
Client = Callable[[], Submit]
Opener = Callable[[Path, Path], Any]  # (folder, stamps) -> context manager of a Client


@dataclass(frozen=True)
class System:
    key: str
    label: str
    open: Opener
    settings: dict[str, Any] = field(default_factory=dict)
    #: measured from the submit's call, not its return (a send without a commit)
    from_call: bool = False


def _engine(url: str, queue: str) -> Any:
    from benchmarks.stamp_app import KIND, make_handlers
    from fsm import Engine, open_store

    return Engine(open_store(url), kinds={KIND: make_handlers(queue)[0][KIND].policy})


@contextmanager
def _jobfsm(
    folder: Path, stamps: Path, store: str, *, app: str = "handlers", delivery: str = "poll",
    poll: float = DEFAULT_POLL, only_poll: bool = False, in_txn: bool = False,
) -> Iterator[Client]:  # fmt: skip
    queue = f"lat-{uuid.uuid4().hex[:10]}"
    with fresh_store_url(store, folder) as url:
        engine = _engine(url, queue)
        sender: Any = None
        dead_letter_existed = True
        try:
            if delivery != "poll":
                from adapters.rabbitmq import RabbitDelivery

                dead_letter_existed = broker.queue_depth(broker.DEAD_LETTER) is not None
                sender = RabbitDelivery(AMQP_URL, engine=engine)
                engine.publisher = sender
            env = {QUEUE_ENV: queue, STAMPS_ENV: str(stamps)}
            with runner.Workers(folder / queue, env, grace=0) as workers:
                ready = folder / f"{queue}.ready"
                if only_poll:
                    argv = ["benchmarks.polling_worker", url, queue, str(poll)]
                    workers.start(*argv, str(CONCURRENCY), str(ready))
                else:
                    options: dict[str, object] = {"queues": queue, "log_level": "WARNING"}
                    options |= {"concurrency": CONCURRENCY, "poll_interval": poll}
                    options |= {"delivery": delivery, "ready_file": ready}
                    app_path = f"benchmarks.stamp_app:{app}"
                    workers.start(*runner.jobfsm_worker(app_path, url, **options))
                workers.wait(ready.exists, runner.START_TIMEOUT, "worker start")
                yield (lambda: _txn_submit(engine, url)) if in_txn else (lambda: _submit(engine))
        finally:
            if sender is not None:
                sender.close()
                broker.delete_jobfsm_names([f"jobfsm.{queue}"], dead_letter_existed)
            engine.store.close()


def _submit(engine: Any) -> Submit:
    return lambda n: engine.submit("stamp", {"n": n}) and None


def _txn_submit(engine: Any, url: str) -> Submit:
    """A submit inside the caller's own transaction: returns once the caller committed."""
    import psycopg

    conn = psycopg.connect(url)  # one per submitting thread, closed with the process

    def submit(n: int) -> None:
        engine.submit("stamp", {"n": n}, conn=conn)
        conn.commit()

    return submit


@contextmanager
def _dramatiq(folder: Path, stamps: Path) -> Iterator[Client]:
    from benchmarks.peers.dramatiq_app import QUEUE_ENV as DQ
    from benchmarks.peers.dramatiq_app import make, stamp_actor

    queue = runner.run_name("dramatiq")
    client, _ = make(queue)
    actor = stamp_actor(client, queue)
    argv = ["dramatiq", "benchmarks.peers.dramatiq_app", "--processes", "1"]
    argv += ["--threads", str(CONCURRENCY), "--queues", queue]
    probe = broker.QueueProbe()
    try:
        with runner.Workers(folder / queue, {DQ: queue, STAMPS_ENV: str(stamps)}) as workers:
            workers.start(*argv)
            probe.wait_consumers(queue, 1, workers.wait)
            yield lambda: actor.send
    finally:
        client.close()
        probe.close()
        broker.delete([queue, f"{queue}.DQ", f"{queue}.XQ"])


@contextmanager
def _celery(folder: Path, stamps: Path) -> Iterator[Client]:
    from benchmarks.peers.celery_app import DURABLE_ENV, make_app
    from benchmarks.peers.celery_app import QUEUE_ENV as CQ
    from benchmarks.peers.celery_bench import worker_argvs

    queue = runner.run_name("celery")
    app, _ = make_app(queue)
    task = app.tasks["stamp"]
    env = {CQ: queue, DURABLE_ENV: "0", STAMPS_ENV: str(stamps)}
    probe = broker.QueueProbe()
    lock = threading.Lock()

    def client() -> Submit:
        with lock:  # one producer (and its channel) per submitting thread
            producer = app.producer_pool.acquire(block=True)
        return lambda n: task.apply_async(args=(n,), producer=producer) and None

    try:
        with runner.Workers(folder / queue, env) as workers:
            for argv in worker_argvs(queue, 1, CONCURRENCY):
                workers.start(*argv)
            probe.wait_consumers(queue, 1, workers.wait)
            yield client
    finally:
        app.close()
        probe.close()
        broker.delete([queue], [queue])


@contextmanager
def _procrastinate(folder: Path, stamps: Path) -> Iterator[Client]:
    import psycopg

    from benchmarks.peers.procrastinate_app import DSN_ENV, make_app
    from benchmarks.peers.procrastinate_bench import APP_PATH

    argv = ["procrastinate", f"--app={APP_PATH}", "worker", f"--concurrency={CONCURRENCY}"]
    argv.append("--listen-notify")
    with fresh_store_url("postgres") as url:
        app = make_app(url).open()
        try:
            app.schema_manager.apply_schema()
            task = app.tasks["stamp"]
            env = {DSN_ENV: url, STAMPS_ENV: str(stamps)}
            with (
                runner.Workers(folder / runner.run_name("procrastinate"), env) as workers,
                psycopg.connect(url, autocommit=True) as probe,
            ):
                workers.start(*argv)

                def listening() -> bool:
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
                    ).fetchone()
                    return bool(row and row[0] >= 1)

                workers.wait(listening, runner.START_TIMEOUT, "procrastinate to LISTEN")
                lock = threading.Lock()  # the sync connector's one connection

                def submit(n: int) -> None:
                    with lock:
                        task.defer(n=n)

                yield lambda: submit
        finally:
            app.close()


def _jobfsm_settings(**extra: Any) -> dict[str, Any]:
    return {"worker": f"1 process x {CONCURRENCY} threads", **extra}


SYSTEMS = (
    System(
        "jobfsm.sqlite",
        f"jobfsm, SQLite, polling every {POLL_INTERVAL} s",
        lambda f, s: _jobfsm(f, s, "sqlite", poll=POLL_INTERVAL),
        _jobfsm_settings(wake="none across processes: the next poll", poll_interval_s=POLL_INTERVAL),  # noqa: E501
    ),
    System(
        "jobfsm.postgres.poll",
        f"jobfsm, PostgreSQL, polling only (LISTEN off) every {POLL_INTERVAL} s",
        lambda f, s: _jobfsm(f, s, "postgres", poll=POLL_INTERVAL, only_poll=True),
        _jobfsm_settings(wake="none: the next poll", poll_interval_s=POLL_INTERVAL),
    ),
    System(
        "jobfsm.postgres.listen",
        "jobfsm, PostgreSQL, LISTEN/NOTIFY (default)",
        lambda f, s: _jobfsm(f, s, "postgres"),
        _jobfsm_settings(wake="NOTIFY sent by the submit's commit", poll_interval_s=DEFAULT_POLL),
    ),
    System(
        "jobfsm.rabbitmq",
        "jobfsm, PostgreSQL + RabbitMQ delivery",
        lambda f, s: _jobfsm(f, s, "postgres", delivery=AMQP_URL),
        _jobfsm_settings(wake="a RabbitMQ message per job, published after the commit"),
    ),
    System(
        "jobfsm.asyncio",
        "jobfsm asyncio worker, PostgreSQL, LISTEN/NOTIFY",
        lambda f, s: _jobfsm(f, s, "postgres", app="async_handlers"),
        _jobfsm_settings(executor="asyncio (async def handler)", wake="NOTIFY"),
    ),
    System(
        "jobfsm.postgres.txn",
        "jobfsm, PostgreSQL, submit inside the caller's transaction (from its commit)",
        lambda f, s: _jobfsm(f, s, "postgres", in_txn=True),
        _jobfsm_settings(wake="NOTIFY sent by the caller's commit", measured="from conn.commit()"),
    ),
    System(
        "dramatiq",
        "dramatiq, RabbitMQ, defaults",
        _dramatiq,
        {"version": version_of("dramatiq"), "setting": "defaults: consumer pushed messages, "
         f"prefetch 2 x {CONCURRENCY} threads, no publisher confirms",
         "measured": "from the call of send (no commit; the message is out before it returns)"},
        from_call=True,
    ),
    System(
        "celery",
        "celery, RabbitMQ, prefetch multiplier 4 (default)",
        _celery,
        {"version": version_of("celery"), "setting": f"prefork x {CONCURRENCY}, prefetch "
         "multiplier 4 (default), early acks, no confirms",
         "measured": "from the call of apply_async (no commit)"},
        from_call=True,
    ),
    System(
        "procrastinate",
        "procrastinate, PostgreSQL, LISTEN/NOTIFY",
        _procrastinate,
        {"version": version_of("procrastinate"), "setting": f"listen_notify on, concurrency "
         f"{CONCURRENCY}, fetch_job_polling_interval default",
         "measured": "from defer's return (its commit)"},
    ),
)  # fmt: skip
