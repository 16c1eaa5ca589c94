"""Resolve store URLs, executors and deliveries through entry points.

Built-in adapters register in the `jobfsm.stores`, `jobfsm.executors` and
`jobfsm.deliveries` groups exactly as a third-party package would, so fsm/
finds them without importing them until one is used.
"""

from __future__ import annotations

import os
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .errors import BadStoreURL, MissingExtra
from .ports import Store

STORE_GROUP = "jobfsm.stores"
EXECUTOR_GROUP = "jobfsm.executors"
DELIVERY_GROUP = "jobfsm.deliveries"
DEFAULT_STORE_URL = "sqlite:///jobfsm.db"
STORE_ENV = "JOBFSM_STORE"

#: which extra brings the driver a built-in adapter needs
_EXTRAS = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "rabbitmq": "rabbitmq",
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
}
#: fault models of deliveries, by URL scheme (`jobfsm faults --delivery URL`)
DELIVERY_FAULTS_GROUP = "jobfsm.delivery_faults"


def _entry(group: str, name: str) -> EntryPoint:
    found = entry_points(group=group)
    for ep in found:
        if ep.name == name:
            return ep
    known = ", ".join(sorted(ep.name for ep in found)) or "none (is jobfsm installed?)"
    raise BadStoreURL(f"no {group} adapter named {name!r}; known: {known}")


def _load(group: str, name: str) -> Any:
    ep = _entry(group, name)
    try:
        return ep.load()
    except ModuleNotFoundError as err:
        extra = _EXTRAS.get(name)
        if extra is not None:
            raise MissingExtra(f"the {name!r} adapter ({err.name} is missing)", extra) from err
        raise


def offered(group: str, subject: object) -> Any:
    """What the first of the `group` entry points offers for `subject` (each is called
    with it and answers None when it is not its adapter's), or None: the fault models
    reach an adapter's own helpers for a store this way (`fsm/` imports no driver)."""
    for ep in entry_points(group=group):
        made = ep.load()(subject)
        if made is not None:
            return made
    return None


def store_url(url: str | None = None) -> str:
    """The URL to use: the argument, else $JOBFSM_STORE, else the SQLite default."""
    return url or os.environ.get(STORE_ENV) or DEFAULT_STORE_URL


def open_store(url: str | None = None) -> Store:
    """Open the store a URL names: memory://, sqlite:///path.db, postgresql://..."""
    url = store_url(url)
    if not isinstance(url, str) or "://" not in url:
        # echoed only if it cannot hold a password (no ':', '@', '?' or '='): a URL
        # typed without "://" may hold its password anywhere
        plain = isinstance(url, str) and len(url) <= 200 and not set(url) & set(":@?=")
        shown = f" {url!r}" if plain else ""
        raise BadStoreURL(
            f"bad store URL{shown}: expected memory://, sqlite:///path.db or postgresql://..."
        )
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    if not scheme.isascii() or not scheme.replace(".", "").replace("-", "").isalnum():
        raise BadStoreURL("bad store URL: its scheme (before '://') is not a name")
    factory = _load(STORE_GROUP, scheme)
    store: Store = factory(url)
    return store


def load_executor(name: str) -> Any:
    return _load(EXECUTOR_GROUP, name)


def load_delivery(name: str) -> Any:
    return _load(DELIVERY_GROUP, name)


def load_delivery_faults(url: str) -> Any:
    """The fault model of the delivery a URL names (amqp://...), by its scheme."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme.isascii() or not scheme.isalnum():
        raise BadStoreURL("bad delivery URL: expected amqp://... (its password is not shown)")
    return _load(DELIVERY_FAULTS_GROUP, scheme)
