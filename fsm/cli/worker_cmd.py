"""`jobfsm worker`: run a worker process for an application's handlers."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ..engine import Engine
from ..errors import BadInput
from ..policies import LeasePolicy, Limits, Policy, RecoveryPolicy
from ..registry import load_delivery, open_store, store_url
from ..worker import DEFAULT_CONCURRENCY, DEFAULT_POLL_INTERVAL, Worker
from . import cli
from ._common import store_option


def load_app(ref: str) -> Mapping[str, Any]:
    """Import "module:obj", a mapping of kind -> handler (e.g. `fsm.worker.handlers.Handlers`)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise BadInput(f"--app must look like 'package.module:handlers', got {ref!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise BadInput(f"--app {ref!r}: cannot import {module_name!r}: {err}") from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            raise BadInput(f"--app {ref!r}: {module_name!r} has no {attr!r}") from err
    if callable(obj) and not isinstance(obj, Mapping):
        try:
            obj = obj()  # a factory returning the handlers
        except TypeError as err:
            raise BadInput(
                f"--app {ref!r} is not a mapping of kind -> handler, nor a factory "
                f"taking no arguments that returns one ({err})"
            ) from err
    if not isinstance(obj, Mapping):
        raise BadInput(f"--app {ref!r} is not a mapping of kind -> handler (got {type(obj)})")
    return obj


@cli.command("worker")
@click.option("--app", "app", required=True, metavar="MODULE:OBJ", help="Handlers to run.")
@store_option
@click.option(
    "--queues", default="default", show_default=True, help="Comma-separated queues to serve."
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=DEFAULT_CONCURRENCY)
@click.option(
    "--executor",
    type=click.Choice(["auto", "thread", "process", "asyncio"]),
    default="auto",
    show_default=True,
    help="auto: asyncio when a handler is `async def`, else thread.",
)
@click.option(
    "--delivery",
    default="poll",
    show_default=True,
    metavar="poll|AMQP_URL",
    help="Store polling, or RabbitMQ wake-ups from the broker at AMQP_URL.",
)
@click.option("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL, show_default=True)
@click.option("--lease-ttl", type=float, default=None, help="Lease TTL in seconds [30].")
@click.option("--heartbeat", type=float, default=None, help="Heartbeat interval in seconds [5].")
@click.option("--sweep-interval", type=float, default=None, help="Recovery sweep period [1].")
@click.option("--max-recoveries", type=int, default=None, help="Recoveries before investigate [3].")
@click.option("--shutdown-grace", type=float, default=None, help="Drain time on SIGTERM [30].")
@click.option("--cancel-grace", type=float, default=5.0, show_default=True)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Created once the worker leases (after its start-up sweep); removed on exit.",
)
def worker(  # noqa: PLR0917 (click passes every option as a parameter)
    app: str,
    store: str | None,
    queues: str,
    concurrency: int,
    executor: str,
    delivery: str,
    poll_interval: float,
    lease_ttl: float | None,
    heartbeat: float | None,
    sweep_interval: float | None,
    max_recoveries: int | None,
    shutdown_grace: float | None,
    cancel_grace: float,
    log_level: str,
    ready_file: str | None,
) -> None:
    """Run handlers for jobs until SIGTERM/SIGINT (drains; a second signal stops at once)."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handlers = load_app(app)
    defaults = Policy()
    lease = LeasePolicy(
        ttl=lease_ttl or defaults.lease.ttl,
        heartbeat_interval=heartbeat or defaults.lease.heartbeat_interval,
    )
    recovery = RecoveryPolicy(
        max_recoveries=(
            defaults.recovery.max_recoveries if max_recoveries is None else max_recoveries
        ),
        sweep_interval=sweep_interval or defaults.recovery.sweep_interval,
    )
    limits = Limits(shutdown_grace=shutdown_grace or defaults.limits.shutdown_grace)
    policy = Policy(lease=lease, recovery=recovery, limits=limits)
    the_store = open_store(store_url(store))
    try:
        engine = Engine(the_store, policy=policy)
        chosen: Any = delivery
        if delivery.startswith(("amqp://", "amqps://")):
            chosen = load_delivery("rabbitmq")(delivery, engine=engine)
            engine.publisher = chosen
        elif delivery != "poll":
            raise BadInput(f"--delivery must be 'poll' or an amqp:// URL, got {delivery!r}")
        w = Worker(
            engine,
            handlers,
            executor=None if executor == "auto" else executor,
            delivery=chosen,
            queues=[q.strip() for q in queues.split(",") if q.strip()],
            concurrency=concurrency,
            poll_interval=poll_interval,
            cancel_grace=cancel_grace,
        )
        click.echo(f"worker {w.owner} serving {','.join(w.queues)}", err=True)
        if ready_file:
            threading.Thread(
                target=_mark_ready, args=(w, Path(ready_file)), name="jobfsm-ready", daemon=True
            ).start()
        w.run()
    finally:
        if ready_file:
            Path(ready_file).unlink(missing_ok=True)
        the_store.close()


def _mark_ready(w: Worker, path: Path) -> None:
    """Create the ready file once the worker has started (bounded wait: one day)."""
    if w.wait_started(86400.0):
        path.write_text(f"{w.owner}\n", encoding="utf-8")
