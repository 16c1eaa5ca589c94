"""`jobfsm dashboard`: the operator web UI over a store (needs `jobfsm[web]`)."""

from __future__ import annotations

import ipaddress
import os
import sys

import click

from ..errors import MissingExtra
from ..registry import open_store, store_url
from . import cli
from ._common import redact, store_option

TOKEN_ENV = "JOBFSM_DASHBOARD_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (localhost, 127.x, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@cli.command("dashboard")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything; offer no action.")
@click.option(
    "--token",
    default=None,
    help=f"Operator token that actions need (or ${TOKEN_ENV}). Without one, actions are "
    "open on a loopback address and disabled on any other.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="uvicorn's log level (info logs every request).",
)
def dashboard(
    *, store: str | None, host: str, port: int, read_only: bool, token: str | None, log_level: str
) -> None:
    """Serve the operator dashboard: overview, lifecycle, jobs, investigate inbox, /metrics."""
    try:
        import uvicorn

        from ..dashboard.app import create_app
    except ImportError as err:
        raise MissingExtra(f"the dashboard (it needs {err.name})", "web") from err
    from ..engine import Engine

    token = token or os.environ.get(TOKEN_ENV) or None
    metrics = None
    from ..telemetry.prometheus import PrometheusMetrics

    try:
        metrics = PrometheusMetrics()
    except MissingExtra:
        click.echo("no /metrics: install the 'metrics' extra to serve it", err=True)
    target = store_url(store)
    the_store = open_store(target)
    try:
        engine = Engine(the_store, metrics=metrics)
        if metrics is not None:
            metrics.watch_store(engine.counts)
        local = is_loopback(host)
        app = create_app(
            engine, read_only=read_only, token=token, trust_local=local, metrics=metrics
        )
        if not read_only and token is None and not local:
            click.echo(
                f"actions disabled: bound to {host}, not a loopback address, and no --token",
                err=True,
            )
        click.echo(f"dashboard for {redact(target)} on http://{host}:{port}/", err=True)
        sys.stderr.flush()
        uvicorn.run(app, host=host, port=port, log_level=log_level.lower())
    finally:
        the_store.close()
