"""Options shared by the commands: `--store`, `--json`, `--actor`/`--reason`, the log
options of the long-running commands, a number of seconds as an option type, and the
address a metrics endpoint binds."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..registry import DEFAULT_STORE_URL, STORE_ENV
from ..text import printable

F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = (
    f"Store URL: memory://, sqlite:///path.db or postgresql://... "
    f"[default: ${STORE_ENV}, else {DEFAULT_STORE_URL}]"
)
#: the worker's delivery when --delivery is not given, as $JOBFSM_STORE is the store's:
#: an amqp:// URL with a password then stays off the command line, where `ps` shows it
DELIVERY_ENV = "JOBFSM_DELIVERY"
DELIVERY_HELP = (
    "Store polling, or RabbitMQ wake-ups from the broker at AMQP_URL "
    f"[default: ${DELIVERY_ENV}, else poll]."
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
#: a DNS host name (RFC 1123): dot-separated labels of letters, digits and inner hyphens
HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)


def store_option(func: F) -> F:
    """`--store URL`; None means $JOBFSM_STORE, else the SQLite default."""
    return click.option("--store", "store", metavar="URL", default=None, help=STORE_HELP)(func)


def delivery_option(func: F) -> F:
    """`--delivery poll|AMQP_URL`; None means $JOBFSM_DELIVERY, else poll (`delivery_of`)."""
    return click.option(
        "--delivery", "delivery", metavar="poll|AMQP_URL", default=None, help=DELIVERY_HELP
    )(func)


def delivery_of(value: str | None) -> str:
    """The delivery to use: `--delivery`, else $JOBFSM_DELIVERY, else "poll"."""
    return value or os.environ.get(DELIVERY_ENV) or "poll"


def json_option(func: F) -> F:
    """`--json`: machine-readable output (one JSON document on stdout)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def _not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    return value


def actor_options(func: F) -> F:
    """`--actor NAME --reason TEXT`, both required and non-empty (recorded in the audit trail)."""
    func = click.option(
        "--reason",
        required=True,
        callback=_not_blank,
        help="Why (recorded in the audit trail; required, not empty).",
    )(func)
    return click.option(
        "--actor",
        required=True,
        callback=_not_blank,
        help="Who is acting (recorded in the audit trail; required, not empty).",
    )(func)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.3
    """A finite number of seconds: > 0 (or >= 0 with `zero_ok`). NaN, inf and negative
    values are usage errors naming the option; nothing is silently replaced by a default."""

    name = "seconds"

    def __init__(self, *, zero_ok: bool = False, minimum: float | None = None) -> None:
        self.zero_ok = zero_ok
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        if number < 0 or (number == 0 and not self.zero_ok):
            bound = "0 or more" if self.zero_ok else "more than 0"
            self.fail(f"{value!r} must be {bound} seconds", param, ctx)
        if self.minimum is not None and number < self.minimum:
            self.fail(f"{value!r} must be at least {self.minimum:g} seconds", param, ctx)
        return number


POSITIVE_SECONDS = Seconds()


def log_options(default_level: str = "INFO") -> Callable[[F], F]:
    """`--log-level` and `--log-format`, for the long-running commands."""

    def add(func: F) -> F:
        func = click.option(
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            default="text",
            show_default=True,
            help="text: one line per record; json: one JSON object per line with the "
            "structured fields (job_id, kind, event, fence, attempt, correlation_id, ...).",
        )(func)
        return click.option(
            "--log-level",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            default=default_level,
            show_default=True,
            help="Least severe log records shown (on stderr).",
        )(func)

    return add


def metrics_bind(host: str | None, port: int | None) -> str:
    """The address the metrics endpoint binds: `host`, else 127.0.0.1; a host without a
    port, or one that is not an address or a host name, is refused naming the option."""
    if host is None:
        return "127.0.0.1"
    if port is None:
        raise click.UsageError("--metrics-host needs --metrics-port (the endpoint's port)")
    name = host.strip("[]")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        if not HOST_NAME.fullmatch(name):
            raise click.BadParameter(
                f"{printable(host)!r} is neither an IP address nor a host name "
                "(e.g. 0.0.0.0 for every interface, 10.0.0.5, metrics.internal)",
                param_hint="'--metrics-host'",
            ) from None
    return name
