"""`jobfsm worker`: run a worker process for an application's handlers."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ..display.format import short_owners
from ..errors import BadInput
from ..inputs import check_name
from ..policies import LeasePolicy, Limits, Policy, RecoveryPolicy
from ..registry import load_delivery, open_store, store_url
from ..service.engine import Engine
from ..service.limits import limit_rows, worker_limits
from ..service.maintenance.retention import (
    DEFAULT_BATCH,
    DEFAULT_EVERY,
    DEFAULT_MAX_BATCHES,
    MAX_BATCH,
    MAX_BATCHES,
    MIN_EVERY,
    RetentionPlan,
    parse_retain,
)
from ..worker import DEFAULT_CONCURRENCY, DEFAULT_POLL_INTERVAL, Worker
from ..worker.collector import tune_collector
from ..worker.handlers import HandlerSpec
from ..worker.ticker import DEFAULT_SCHEDULE_INTERVAL, MAX_SCHEDULE_INTERVAL
from .apps import DEFAULT_APP_OBJECT, load_app
from .logsetup import setup_logging
from .options import (
    DELIVERY_ENV,
    POSITIVE_SECONDS,
    delivery_of,
    delivery_option,
    log_options,
    metrics_bind,
    store_option,
)

log = logging.getLogger(__name__)

#: how often the ready file is brought in line with the worker's readiness
READY_CHECK_INTERVAL = 0.05


def handler_queues(handlers: Mapping[str, Any]) -> dict[str, list[str]]:
    """queue -> the kinds whose handlers name it (a plain callable's queue is 'default')."""
    out: dict[str, list[str]] = {}
    for kind, spec in handlers.items():
        queue = spec.policy.queue if isinstance(spec, HandlerSpec) else "default"
        out.setdefault(queue, []).append(kind)
    return out


def parse_queues(text: str) -> list[str]:
    """`--queues a,b`: each name checked by the engine's rule (BadInput naming it)."""
    names = [q.strip() for q in text.split(",")]
    if not any(names):
        raise BadInput(f"--queues names no queue: {text!r}")
    return list(dict.fromkeys(check_name("--queues entry", q) for q in names if q))


def parse_limits(values: tuple[str, ...]) -> dict[str, int]:
    """`--limit KIND=N` (or `queue:NAME=N`) values as a worker's own limits."""
    out: dict[str, int] = {}
    for text in values:
        name, sep, n = text.rpartition("=")
        if not sep or not n.strip().lstrip("-").isdigit():
            raise BadInput(f"--limit takes KIND=N (or queue:NAME=N); got {text!r:.80}")
        out.update(worker_limits({name.strip(): int(n)}))
    return out


@click.command("worker")
@click.option(
    "--app",
    "app",
    required=True,
    metavar="MODULE[:OBJ]",
    help=f"Handlers to run: a mapping kind -> handler (OBJ defaults to '{DEFAULT_APP_OBJECT}'); "
    "MODULE is imported from the current directory or the installed packages.",
)
@store_option
@click.option(
    "--queues",
    default=None,
    metavar="Q1,Q2",
    help="Comma-separated queues to serve [default: every queue the handlers name].",
)
@click.option(
    "--concurrency", type=click.IntRange(1, 1024), default=DEFAULT_CONCURRENCY, show_default=True
)
@click.option(
    "--limit",
    "own_limits",
    multiple=True,
    metavar="KIND=N",
    help="At most N jobs of KIND (or queue:NAME=N) held by this worker at once; repeatable. "
    "Global limits: `jobfsm limits set`.",
)
@click.option(
    "--executor",
    type=click.Choice(["auto", "thread", "process", "asyncio"]),
    default="auto",
    show_default=True,
    help="auto: asyncio when a handler is `async def`, else thread.",
)
@delivery_option
@click.option(
    "--rabbitmq-prefetch",
    type=click.IntRange(1, 65535),
    default=None,
    help="RabbitMQ: unacked deliveries per queue [the executor's free slots].",
)
@click.option(
    "--rabbitmq-recovery-attempts",
    type=click.IntRange(0, 1000),
    default=None,
    help="RabbitMQ: most reconnection attempts after a lost or failed connection; 0 disables [15].",
)
@click.option(
    "--rabbitmq-recovery-interval",
    type=float,
    default=None,
    help="RabbitMQ: longest wait between reconnection attempts, seconds [60].",
)
@click.option(
    "--rabbitmq-heartbeat",
    type=click.IntRange(1, 65535),
    default=None,
    help="RabbitMQ: AMQP heartbeat timeout proposed to the broker, seconds [10].",
)
@click.option(
    "--rabbitmq-queue-type",
    type=click.Choice(["classic", "quorum"]),
    default=None,
    help="RabbitMQ: type of the queues declared [classic].",
)
@click.option(
    "--poll-interval", type=POSITIVE_SECONDS, default=DEFAULT_POLL_INTERVAL, show_default=True
)
@click.option("--lease-ttl", type=POSITIVE_SECONDS, default=None, help="Lease TTL in seconds [30].")
@click.option(
    "--heartbeat", type=POSITIVE_SECONDS, default=None, help="Heartbeat interval in seconds [5]."
)
@click.option(
    "--sweep-interval", type=POSITIVE_SECONDS, default=None, help="Recovery sweep period [1]."
)
@click.option(
    "--max-recoveries",
    type=click.IntRange(min=0),
    default=None,
    help="Crash recoveries before investigate: the budget of jobs this process submits, and "
    "the most any job this worker runs may use (enforced at start, stricter only) [3].",
)
@click.option(
    "--shutdown-grace", type=POSITIVE_SECONDS, default=None, help="Drain time on SIGTERM [30]."
)
@click.option("--cancel-grace", type=POSITIVE_SECONDS, default=5.0, show_default=True)
@log_options()
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Exists while the worker is ready (leasing: store and delivery up); removed while it "
    "is not, and on exit. Supervisors should also check the process is alive.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on HOST:PORT/metrics (HOST: --metrics-host; needs the "
    "metrics extra).",
)
@click.option(
    "--metrics-host",
    metavar="ADDRESS",
    default=None,
    help="Address the metrics endpoint binds [default: 127.0.0.1]: 0.0.0.0 (or ::) for every "
    "interface, as a scraper off the host needs (Kubernetes scrapes the pod IP). Needs "
    "--metrics-port.",
)
@click.option(
    "--scheduler/--no-scheduler",
    default=True,
    show_default=True,
    help="Submit the due ticks of schedules (docs/schedules.md); each tick once, however "
    "many workers run one.",
)
@click.option(
    "--schedule-interval",
    type=click.FloatRange(0, MAX_SCHEDULE_INTERVAL, min_open=True),
    default=DEFAULT_SCHEDULE_INTERVAL,
    show_default=True,
    help=f"Seconds between two scheduler passes (at most {MAX_SCHEDULE_INTERVAL:g}).",
)
@click.option(
    "--retain",
    "retains",
    multiple=True,
    metavar="STATE=DURATION",
    help="Prune finished jobs automatically (docs/retention.md): keep jobs in STATE "
    "(succeeded, failed, cancelled) for DURATION (7d, 12h, 30m, 45s, or 'forever'); repeat "
    "per state. States not named keep the defaults (succeeded, cancelled: 7d; failed: "
    "forever). One worker of the store prunes at a time. Off unless given.",
)
@click.option(
    "--retain-every",
    type=click.FloatRange(MIN_EVERY, 86400.0),
    default=DEFAULT_EVERY,
    show_default=True,
    help="Seconds between two retention passes (with --retain).",
)
@click.option(
    "--retain-batch",
    type=click.IntRange(1, MAX_BATCH),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Most jobs one retention batch (one transaction) deletes.",
)
@click.option(
    "--retain-max-batches",
    type=click.IntRange(1, MAX_BATCHES),
    default=DEFAULT_MAX_BATCHES,
    show_default=True,
    help="Most batches one retention pass runs.",
)
def worker(  # noqa: PLR0917 (click passes every option as a parameter)
    app: str,
    store: str | None,
    queues: str | None,
    concurrency: int,
    own_limits: tuple[str, ...],
    executor: str,
    delivery: str | None,
    poll_interval: float,
    lease_ttl: float | None,
    heartbeat: float | None,
    sweep_interval: float | None,
    max_recoveries: int | None,
    shutdown_grace: float | None,
    cancel_grace: float,
    log_level: str,
    log_format: str,
    ready_file: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
    scheduler: bool,
    schedule_interval: float,
    retains: tuple[str, ...],
    retain_every: float,
    retain_batch: int,
    retain_max_batches: int,
    **rabbitmq: Any,
) -> None:
    """Run handlers for jobs until SIGTERM/SIGINT (drains; a second signal stops at once).

    Serves every queue the handlers name unless --queues is given."""
    setup_logging(log_level, log_format)
    url = store_url(store)
    if url.split("://", 1)[0].lower() == "memory":
        raise click.BadParameter(
            "memory:// is private to one process, so no other process could submit to this "
            "worker: use sqlite:///path.db or postgresql://...",
            param_hint="'--store'",
        )
    retention = None
    if retains:
        try:
            keep = dict(parse_retain(r) for r in retains)
        except BadInput as err:
            raise click.BadParameter(str(err), param_hint="'--retain'") from err
        retention = RetentionPlan(
            keep=keep, every=retain_every, batch=retain_batch, max_batches=retain_max_batches
        )
    handlers = load_app(app)
    named = handler_queues(handlers)
    served = parse_queues(queues) if queues is not None else sorted(named) or ["default"]
    unserved = {q: kinds for q, kinds in named.items() if q not in served}
    if unserved:
        missing = ", ".join(f"{q!r} ({', '.join(sorted(k))})" for q, k in sorted(unserved.items()))
        log.warning(
            "handlers name queues this worker does not serve: %s; their jobs run only where "
            "a worker serves them (add them: --queues %s)",
            missing,
            ",".join([*served, *sorted(unserved)]),
        )
    defaults = Policy()
    try:
        lease = LeasePolicy(
            ttl=defaults.lease.ttl if lease_ttl is None else lease_ttl,
            heartbeat_interval=(
                defaults.lease.heartbeat_interval if heartbeat is None else heartbeat
            ),
        )
    except ValueError as err:
        raise click.UsageError(f"--lease-ttl/--heartbeat: {err}") from err
    recovery = RecoveryPolicy(
        max_recoveries=(
            defaults.recovery.max_recoveries if max_recoveries is None else max_recoveries
        ),
        sweep_interval=(
            defaults.recovery.sweep_interval if sweep_interval is None else sweep_interval
        ),
    )
    limits = Limits(
        shutdown_grace=defaults.limits.shutdown_grace if shutdown_grace is None else shutdown_grace
    )
    policy = Policy(lease=lease, recovery=recovery, limits=limits)
    metrics_address = metrics_bind(metrics_host, metrics_port)
    metrics = None
    if metrics_port is not None:
        from ..telemetry.prometheus import PrometheusMetrics

        metrics = PrometheusMetrics()
    the_store = open_store(url)
    marker: ReadyFile | None = None
    stop_metrics = None
    try:
        engine = Engine(the_store, policy=policy, metrics=metrics)
        if metrics is not None and metrics_port is not None:
            metrics.watch_store(engine.counts)
            metrics.watch_limits(lambda: limit_rows(engine))
            try:
                stop_metrics = metrics.serve(metrics_port, addr=metrics_address)
            except OSError as err:  # in use, not an address of this host, ...
                raise click.UsageError(
                    f"--metrics-host/--metrics-port: cannot serve metrics on "
                    f"{metrics_address}:{metrics_port}: {err.strerror or err}"
                ) from err
            log.info("metrics on http://%s:%d/metrics", metrics_address, metrics_port)
        delivery = delivery_of(delivery)
        chosen: Any = delivery
        # --rabbitmq-X -> option X of the RabbitMQ delivery (validated there, named in errors)
        options = {k.removeprefix("rabbitmq_"): v for k, v in rabbitmq.items() if v is not None}
        if delivery.lower().startswith(("amqp://", "amqps://")):
            chosen = load_delivery("rabbitmq")(delivery, engine=engine, **options)
            engine.publisher = chosen
        elif delivery != "poll":  # the value is not echoed: it may hold a password
            raise BadInput(
                "--delivery must be 'poll' or an amqp:// or amqps:// URL "
                f"(given by --delivery, else ${DELIVERY_ENV})"
            )
        elif options:
            names = ", ".join(f"--rabbitmq-{k.replace('_', '-')}" for k in options)
            raise BadInput(f"{names}: only with a RabbitMQ delivery (--delivery amqp://...)")
        w = Worker(
            engine,
            handlers,
            executor=None if executor == "auto" else executor,
            delivery=chosen,
            queues=served,
            concurrency=concurrency,
            limits=parse_limits(own_limits),
            poll_interval=poll_interval,
            cancel_grace=cancel_grace,
            scheduler=scheduler,
            schedule_interval=schedule_interval,
            retention=retention,
        )
        serving = ",".join(w.queues)
        if log_format == "json":  # stderr stays one JSON object per line
            log.info("worker %s serving %s", w.owner, serving)
        else:
            click.echo(f"worker {short_owners(str(w.owner))} serving {serving}", err=True)
        if ready_file:
            marker = ReadyFile(w, Path(ready_file))
            marker.start()
        tune_collector()  # this process is the worker's own (fsm.worker.collector)
        w.run()
    finally:
        if stop_metrics is not None:
            stop_metrics()
        if marker is not None:
            marker.stop()
        the_store.close()


class ReadyFile:
    """Keeps `path` in line with `worker.ready`: created (not following a symlink) while the
    worker is ready, removed while it is not (store or delivery away, draining) and on exit.
    A SIGKILLed worker cannot remove it: supervisors also check the process."""

    def __init__(self, worker: Worker, path: Path) -> None:
        self.worker = worker
        self.path = path
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jobfsm-ready", daemon=True)
        self._shown = False

    def start(self) -> None:
        self.path.unlink(missing_ok=True)  # one a killed worker left: not ready yet
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5.0)
        self._remove()

    def _loop(self) -> None:
        while not self._done.is_set():
            ready = self.worker.ready
            if ready and not self._shown:
                self._create()
            elif not ready and self._shown:
                self._remove()
            self._done.wait(READY_CHECK_INTERVAL)

    def _create(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            reason = "it is a symlink" if err.errno == errno.ELOOP else str(err)
            log.error("ready file %s not written: %s", self.path, reason)
            self._done.set()
            return
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{self.worker.owner}\n")
        self._shown = True

    def _remove(self) -> None:
        if self._shown:
            self.path.unlink(missing_ok=True)
            self._shown = False
