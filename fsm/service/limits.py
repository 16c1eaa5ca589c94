"""Global limits: declared by an operator (`jobfsm limits set`) or in code, kept in the
store so that every worker obeys the same ones, enforced by each store's claim
(`fsm.ports.LimitsClaims`, the rule in `fsm.lifecycle.limits`). docs/flow-control.md.

Every change is checked before anything is written (a `BadInput` names the value),
and audited with its actor and reason in the store (`limit_changes`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import attrs

from ..errors import BadInput
from ..inputs import check_operator_text
from ..lifecycle.limits import Limit, LimitChange, checked, limit_key, parse_key
from ..ports import JobBrowser, LimitsClaims, ListRequest
from .kernel import Kernel, KernelSource

log = logging.getLogger(__name__)


@attrs.frozen
class LimitStatus:
    """A limit and what it holds now: jobs holding a slot, and jobs waiting."""

    limit: Limit
    holding: int
    waiting: int


def limiting(kernel: Kernel) -> LimitsClaims:
    """The store, if it keeps limits; a BadInput names the store that cannot."""
    store = kernel.store
    if not isinstance(store, LimitsClaims):
        raise BadInput(f"{type(store).__name__} cannot keep limits (docs/flow-control.md)")
    return store


def _known_kind(kernel: Kernel, name: str) -> bool:
    """A kind is known when this engine registered it or the store holds a job of it
    (or a limit: `set_limit` checks that first)."""
    if name in kernel.kinds:
        return True
    store = kernel.store
    if isinstance(store, JobBrowser):
        return bool(store.list_jobs(ListRequest(kinds=(name,), limit=1)).jobs)
    return False


def set_limit(
    kernel: Kernel,
    key: str,
    *,
    concurrency: object = None,
    rate: object = None,
    period: object = None,
    actor: str,
    reason: str,
    origin: str = "operator",
    new_kind: bool = False,
) -> tuple[Limit, Limit | None]:
    """Store a limit of `key` (`kind:NAME` or `queue:NAME`), replacing its previous one;
    returns (the limit, the one it replaced). A kind neither registered nor seen in the
    store is refused unless `new_kind` (a limit for a kind yet to be deployed).

    Lowering a limit below the jobs now holding a slot stops nothing: those finish,
    and no job of the key is leased until fewer hold one than the new limit."""
    store = limiting(kernel)
    for what, value in (("actor", actor), ("reason", reason)):
        check_operator_text(f"limit of {key!r:.80}", what, value)
    limit = checked(
        key,
        concurrency=concurrency,
        rate=rate,
        period=period,
        origin=origin,
        actor=actor,
        reason=reason,
        at=kernel.clock.now(),
    )
    if (
        limit.scope == "kind"
        and not new_kind
        and key not in store.limits()  # a kind with a limit is known to the store
        and not _known_kind(kernel, limit.name)
    ):
        raise BadInput(
            f"limit {key}: unknown kind {limit.name!r} (no handler registered here and no "
            "job of it stored); check the name, or pass new_kind (--new-kind) for a kind "
            "yet to be deployed"
        )
    with kernel.observers.operator("limit", key, actor):
        before = store.set_limit(limit)
    log.warning("limit %s set by %s to %s: %s", key, actor, limit.describe(), reason)
    return limit, before


def clear_limit(kernel: Kernel, key: str, *, actor: str, reason: str) -> Limit | None:
    """Remove the limit of `key`; returns it (None if there was none)."""
    store = limiting(kernel)
    parse_key(key)
    for what, value in (("actor", actor), ("reason", reason)):
        check_operator_text(f"clear of limit {key}", what, value)
    with kernel.observers.operator("unlimit", key, actor):
        before = store.clear_limit(key, actor=actor, reason=reason, at=kernel.clock.now())
    log.warning("limit %s cleared by %s: %s", key, actor, reason)
    return before


def limit_statuses(kernel: Kernel) -> list[LimitStatus]:
    """Every limit of the store, by key, with the jobs holding a slot and waiting."""
    store = kernel.store
    if not isinstance(store, LimitsClaims):
        return []
    limits = store.limits()
    usage = store.limit_usage(sorted(limits), kernel.heartbeat_states, kernel.lease_states)
    return [LimitStatus(limits[k], *usage.get(k, (0, 0))) for k in sorted(limits)]


def limit_changes(kernel: Kernel, key: str | None = None, limit: int = 100) -> list[LimitChange]:
    """The newest changes of limits (of `key`), newest first."""
    if key is not None:
        parse_key(key)
    return limiting(kernel).limit_changes(key, limit)


def worker_caps(limits: Mapping[str, int], holding: Mapping[str, int]) -> dict[str, int]:
    """A worker's own limits (`--limit kind=N`, by limit key) less the jobs of each key
    it holds now: how many more of each its next claim may lease."""
    return {key: max(0, n - holding.get(key, 0)) for key, n in limits.items()}


def worker_limits(limits: Mapping[str, object]) -> dict[str, int]:
    """A worker's own limits checked: `kind:NAME`, `queue:NAME` or a bare kind name ->
    a positive integer (`jobfsm worker --limit KIND=N`); a BadInput names a bad one."""
    out: dict[str, int] = {}
    for key, n in limits.items():
        full = key if isinstance(key, str) and ":" in key else limit_key("kind", key)
        out[full] = checked(full, concurrency=n).concurrency or 0
    return out


def limit_rows(source: KernelSource) -> list[tuple[str, int, int]]:
    """(limit key, jobs holding a slot, jobs waiting) of every limit of the store: what
    `fsm.telemetry.prometheus.PrometheusMetrics.watch_limits` exports."""
    return [(s.limit.key, s.holding, s.waiting) for s in limit_statuses(source.kernel)]


def declare(kernel: Kernel, limit: Limit, *, actor: str) -> Limit | None:
    """Store a limit declared in code (a handler's `concurrency_limit`/`rate_limit`)
    unless the store holds the same one, or one an operator set (an operator's limit
    wins until cleared). Returns the limit stored, None if nothing was written."""
    store = kernel.store
    if not isinstance(store, LimitsClaims):
        log.warning("%s cannot keep limits: %s not enforced", type(store).__name__, limit.key)
        return None
    current = store.limits().get(limit.key)
    if current is not None and current.origin != "code":
        log.info("limit %s: the operator's %s holds, not the code's", limit.key, current.describe())
        return None
    if current is not None and current.describe() == limit.describe():
        return None
    stored, _ = set_limit(
        kernel,
        limit.key,
        concurrency=limit.concurrency,
        rate=limit.rate,
        period=limit.period,
        actor=actor,
        reason=f"declared with the handler of {limit.name}",
        origin="code",
        new_kind=True,
    )
    return stored
