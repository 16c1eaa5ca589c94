"""`jobfsm dashboard`: the operator web UI over a store (needs `jobfsm[web]`).

No page and no action is anonymous, on any address: operators log in with a token
(from `$JOBFSM_DASHBOARD_TOKEN` or `--token-file`, never the command line, where
`ps` shows it); with none configured, a random token is made at start and a log-in
link printed, as Jupyter does. See docs/security.md for the trust model.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import sys
from pathlib import Path

import click

from ..errors import BadInput, MissingExtra
from ..registry import open_store, store_url
from ..secrets import redact_url
from .options import store_option

TOKEN_ENV = "JOBFSM_DASHBOARD_TOKEN"
#: bind addresses that listen on every interface
WILDCARDS = ("0.0.0.0", "::", "")
#: requests served at once before uvicorn answers 503 (bounds a flood of clients)
MAX_CONNECTIONS = 200


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (localhost, 127.x, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_tokens(token_file: str | None, environ: dict[str, str]) -> dict[str, str] | None:
    """Operator tokens from `--token-file` or `$JOBFSM_DASHBOARD_TOKEN` (not both), or
    None when neither is set."""
    from ..dashboard.auth import parse_tokens

    env_text = environ.get(TOKEN_ENV)
    if token_file is not None and env_text:
        raise BadInput(f"give --token-file or ${TOKEN_ENV}, not both")
    if token_file is not None:
        path = Path(token_file)
        try:
            text = path.read_text(encoding="utf-8")
            mode = path.stat().st_mode
        except (OSError, UnicodeDecodeError) as err:
            raise BadInput(f"--token-file {token_file!r}: cannot read it ({err})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            click.echo(
                f"warning: --token-file {token_file} can be read by other users "
                f"(chmod 600 {token_file})",
                err=True,
            )
        return parse_tokens(text, f"--token-file {token_file}")
    if env_text:
        return parse_tokens(env_text, f"${TOKEN_ENV}")
    return None


def hosts_for(bind: str, given: tuple[str, ...]) -> list[str]:
    """The Host names to answer to: localhost's, the bind address (or this machine's
    names when bound to every interface), and every `--allowed-host`."""
    from ..dashboard.security import DEFAULT_HOSTS

    hosts = [*DEFAULT_HOSTS]
    if bind in WILDCARDS:
        hosts += [socket.gethostname(), socket.getfqdn()]
    else:
        hosts.append(bind)
    return [*dict.fromkeys([*hosts, *given])]


def _refuse_token_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.BadParameter(
            f"a token on the command line is visible to every user of this machine (ps): "
            f"set ${TOKEN_ENV} or use --token-file",
            ctx=ctx,
            param=param,
        )


@click.command("dashboard")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything; offer no action.")
@click.option(
    "--public-read",
    is_flag=True,
    help="Let anyone who reaches the port read every page and /metrics (actions still "
    "need a log-in).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"File of operator tokens, one `NAME:TOKEN` a line (or set ${TOKEN_ENV}). "
    "Without either, a random token is made and a log-in link printed.",
)
@click.option("--token", hidden=True, expose_value=False, callback=_refuse_token_option)
@click.option(
    "--allowed-host",
    "allowed_host",
    multiple=True,
    metavar="NAME",
    help="A Host name the dashboard answers to, besides localhost and the bind address "
    "(repeat it; '*' turns the check off).",
)
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True), default=None)
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True), default=None)
@click.option(
    "--behind-proxy",
    is_flag=True,
    help="Trust X-Forwarded-Proto/For from a proxy on this machine (one that ends TLS).",
)
@click.option(
    "--refresh",
    type=click.IntRange(1, 3600),
    default=5,
    show_default=True,
    help="Seconds between one live refresh of a page and the next.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="uvicorn's log level (info logs every request).",
)
def dashboard(
    *,
    store: str | None,
    host: str,
    port: int,
    read_only: bool,
    public_read: bool,
    token_file: str | None,
    allowed_host: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    behind_proxy: bool,
    refresh: int,
    log_level: str,
) -> None:
    """Serve the operator dashboard: overview, lifecycle, jobs, investigate inbox, /metrics."""
    try:
        import uvicorn

        from ..dashboard.app import create_app
        from ..dashboard.auth import DEFAULT_OPERATOR, new_token
    except ImportError as err:
        raise MissingExtra(f"the dashboard (it needs {err.name})", "web") from err
    from ..service.engine import Engine

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    tokens = read_tokens(token_file, dict(os.environ))
    made = tokens is None
    if tokens is None:
        tokens = {DEFAULT_OPERATOR: new_token()}
    hosts = hosts_for(host, allowed_host)
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
        app = create_app(
            engine,
            tokens=tokens,
            read_only=read_only,
            public_read=public_read,
            allowed_hosts=hosts,
            refresh=refresh,
            metrics=metrics,
        )
        scheme = "https" if tls_cert else "http"
        shown = next((h for h in allowed_host if h != "*"), None) or (
            "localhost" if host in WILDCARDS else host
        )
        shown = f"[{shown}]" if ":" in shown else shown
        base = f"{scheme}://{shown}:{port}"
        click.echo(f"dashboard for {redact_url(target)} on {base}/", err=True)
        if made:
            click.echo(
                f"no operator token configured: log in as {DEFAULT_OPERATOR!r} at\n"
                f"    {base}/login?token={tokens[DEFAULT_OPERATOR]}",
                err=True,
            )
        if not tls_cert and not behind_proxy and not is_loopback(host):
            click.echo(
                f"warning: plain HTTP on {host}: tokens and sessions cross the network in "
                "clear text; use --tls-cert/--tls-key or a TLS proxy (docs/security.md)",
                err=True,
            )
        sys.stderr.flush()
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level=log_level.lower(),
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            proxy_headers=behind_proxy,
            forwarded_allow_ips="127.0.0.1,::1" if behind_proxy else None,
            server_header=False,
            limit_concurrency=MAX_CONNECTIONS,
        )
    finally:
        the_store.close()
