"""A Prometheus exporter for `fsm.telemetry.metrics.Metrics`, plus job counts read from the store.

    metrics = PrometheusMetrics()                 # registers on its own registry
    engine = Engine(store, metrics=metrics)
    metrics.watch_store(engine.counts)            # jobfsm_jobs{queue,state}
    metrics.serve(9108)                           # or mount metrics.asgi_app()

Needs the `metrics` extra (prometheus_client); without it,
constructing the exporter raises MissingExtra naming the extra.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra
from .metrics import MetricsBase

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

#: seconds a store count stays cached: a scrape every few seconds costs one
#: GROUP BY per interval, however many scrapers there are
COUNTS_TTL = 5.0
#: queues exported by name in `jobfsm_jobs`, the ones holding the most jobs; the rest
#: are summed per state under `queue="other"` (docs/metrics.md), so the series stay
#: at most (TOP_QUEUES + 1) x states however many queues the store holds
TOP_QUEUES = 100
OTHER_QUEUES = "other"
#: attempt duration buckets (seconds): sub-millisecond handlers up to the 30 min default timeout
ATTEMPT_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 120, 600, 1800)
#: queue wait buckets (seconds): from a worker woken at once (10 ms: a wake-up by
#: LISTEN/NOTIFY or RabbitMQ and one claim), through the default 1 s poll interval and
#: a few polls, to backlogs of minutes and hours (past 4 h a queue is down rather than
#: slow). 300 s is a bound because the shipped JobfsmQueueLatencyHigh alert compares
#: p95 with 300 s: whether a quantile is above a bound is exact, while a threshold
#: between two bounds is compared with an interpolated guess. 12 bounds: with +Inf,
#: _sum and _count, 15 series per queue label.
WAIT_BUCKETS = (0.01, 0.05, 0.25, 1, 2.5, 10, 30, 60, 300, 900, 3600, 14400)


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as err:
        raise MissingExtra("Prometheus metrics (prometheus_client)", "metrics") from err
    return prometheus_client


def top_queues(
    counts: dict[tuple[str, str], int], top: int = TOP_QUEUES
) -> dict[tuple[str, str], int]:
    """`counts` by (queue, state) with the `top` queues holding the most jobs kept by
    name (ties by name) and every other queue summed per state under OTHER_QUEUES."""
    totals: dict[str, int] = {}
    for (queue, _), n in counts.items():
        totals[queue] = totals.get(queue, 0) + n
    kept = set(sorted(totals, key=lambda q: (-totals[q], q))[:top])
    out: dict[tuple[str, str], int] = {}
    for (queue, state), n in counts.items():
        key = (queue if queue in kept else OTHER_QUEUES, state)
        out[key] = out.get(key, 0) + n
    return out


class _StoreCounts:
    """A custom collector: jobs per (queue, state), read through `counts` at most every
    TTL, the queues beyond the `top` largest summed as one (`top_queues`)."""

    def __init__(
        self, counts: Callable[[], dict[tuple[str, str], int]], ttl: float, top: int
    ) -> None:
        self._counts = counts
        self._ttl = ttl
        self._top = top
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._cached: dict[tuple[str, str], int] = {}

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            if time.monotonic() - self._at >= self._ttl:
                self._cached = top_queues(dict(self._counts()), self._top)
                self._at = time.monotonic()
            counts = self._cached
        family = GaugeMetricFamily(
            "jobfsm_jobs", "Jobs in the store by queue and state", labels=["queue", "state"]
        )
        for (queue, state), n in sorted(counts.items()):
            family.add_metric([queue, state], n)
        yield family


#: the most limits exported by key (`jobfsm_limit_*`); a store holding more exports
#: the first ones by key (limits are set by operators and code: a handful in practice)
MAX_LIMITS = 1000

#: (limit key, jobs holding a slot, jobs waiting) of each limit of the store
LimitRows = Callable[[], list[tuple[str, int, int]]]


class _StoreLimits:
    """A custom collector: `jobfsm_limit_holding{limit}` and `jobfsm_limit_waiting{limit}`
    for each global limit (docs/flow-control.md), read at most every TTL."""

    def __init__(self, rows: LimitRows, ttl: float) -> None:
        self._rows = rows
        self._ttl = ttl
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._cached: list[tuple[str, int, int]] = []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            if time.monotonic() - self._at >= self._ttl:
                self._cached = sorted(self._rows())[:MAX_LIMITS]
                self._at = time.monotonic()
            rows = self._cached
        holding = GaugeMetricFamily(
            "jobfsm_limit_holding",
            "Jobs holding a slot of a global limit (leased, running, cancelling)",
            labels=["limit"],
        )
        waiting = GaugeMetricFamily(
            "jobfsm_limit_waiting",
            "Jobs waiting to be leased (queued, retry_wait) under a global limit",
            labels=["limit"],
        )
        for key, held, waits in rows:
            holding.add_metric([key], held)
            waiting.add_metric([key], waits)
        yield holding
        yield waiting


class _FirstQueues:
    """Queue labels of an event-fed series: the first `top` queues seen are labelled by
    name, later ones OTHER_QUEUES (a counter cannot forget a queue as the store counts
    of `jobfsm_jobs` do), so the series stay at most `top + 1` per other label."""

    def __init__(self, top: int = TOP_QUEUES) -> None:
        self._top = top
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def label(self, queue: str) -> str:
        with self._lock:
            if queue in self._seen:
                return queue
            if len(self._seen) < self._top:
                self._seen.add(queue)
                return queue
        return OTHER_QUEUES


class PrometheusMetrics(MetricsBase):
    """`fsm.telemetry.metrics.Metrics` as Prometheus counters and histograms (thread-safe)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        pc = _client()
        self.registry: CollectorRegistry = registry or pc.CollectorRegistry()
        r = self.registry
        self._transitions = pc.Counter(
            "jobfsm_transitions",
            "Applied transitions by kind, event and from/to state",
            ["kind", "event", "from_state", "to_state"],
            registry=r,
        )
        self._attempts = pc.Histogram(
            "jobfsm_attempt_seconds",
            "Attempt durations by kind and outcome",
            ["kind", "outcome"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self._renewed = pc.Counter(
            "jobfsm_lease_renewals", "Leases extended by heartbeats", registry=r
        )
        self._renew_lost = pc.Counter(
            "jobfsm_lease_renewals_lost",
            "Heartbeat renewals that found the lease moved",
            registry=r,
        )
        self._lost = pc.Counter(
            "jobfsm_leases_lost", "Leases a worker found taken from it", ["kind"], registry=r
        )
        self._recoveries = pc.Counter(
            "jobfsm_recoveries",
            "Jobs the recovery sweep took back, by verdict and new state",
            ["verdict", "to_state"],
            registry=r,
        )
        self._rejected = pc.Counter(
            "jobfsm_rejected_reports",
            "Stale reports (old fence) rejected and recorded",
            ["kind", "event"],
            registry=r,
        )
        self._codes = pc.Counter(
            "jobfsm_transition_codes",
            "Audited transitions by kind, event, new state and reason code (specs/job.toml)",
            ["kind", "event", "to_state", "code"],
            registry=r,
        )
        self._delivery = pc.Counter(
            "jobfsm_delivery_recoveries",
            "Delivery reconnections and wake-up repairs",
            ["delivery", "reason"],
            registry=r,
        )
        self._pruned = pc.Counter(
            "jobfsm_retention_pruned",
            "Finished jobs deleted by this process's automatic retention, by queue and state",
            ["queue", "state"],
            registry=r,
        )
        self._passes = pc.Counter(
            "jobfsm_retention_passes",
            "Automatic retention passes this process ran holding the retention lease",
            registry=r,
        )
        self._last_pass = pc.Gauge(
            "jobfsm_retention_last_pass_timestamp_seconds",
            "When this process's last retention pass holding the lease ended (Unix time)",
            registry=r,
        )
        self._waits = pc.Histogram(
            "jobfsm_queue_wait_seconds",
            "How long after it was due each attempt started (its wait in the queue), by queue",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        #: queues named in `jobfsm_retention_pruned` and `jobfsm_queue_wait_seconds`,
        #: each its own first TOP_QUEUES seen (later ones are OTHER_QUEUES)
        self._pruned_queues = _FirstQueues()
        self._wait_queues = _FirstQueues()

    # --- Metrics ------------------------------------------------------------------------

    def transition(self, kind: str, event: str, from_state: str | None, to_state: str) -> None:
        self._transitions.labels(kind, event, from_state or "none", to_state).inc()

    def attempt_seconds(self, kind: str, outcome: str, seconds: float) -> None:
        self._attempts.labels(kind, outcome).observe(seconds)

    def lease_renewals(self, renewed: int, lost: int) -> None:
        self._renewed.inc(renewed)
        self._renew_lost.inc(lost)

    def lease_lost(self, kind: str) -> None:
        self._lost.labels(kind).inc()

    def recovery(self, verdict: str, to_state: str) -> None:
        self._recoveries.labels(verdict, to_state).inc()

    def rejected_report(self, kind: str, event: str) -> None:
        self._rejected.labels(kind, event).inc()

    def delivery_recovery(self, delivery: str, reason: str) -> None:
        self._delivery.labels(delivery, reason).inc()

    def transition_code(self, kind: str, event: str, to_state: str, code: str) -> None:
        self._codes.labels(kind, event, to_state, code).inc()

    def retention_pass(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        for (queue, state), n in sorted(pruned.items()):
            self._pruned.labels(self._pruned_queues.label(queue), state).inc(n)
        self._passes.inc()
        self._last_pass.set(at)

    def queue_wait(self, queue: str, seconds: float) -> None:
        self._waits.labels(self._wait_queues.label(queue)).observe(seconds)

    # --- store gauges and serving -------------------------------------------------------

    def watch_store(
        self,
        counts: Callable[[], dict[tuple[str, str], int]],
        ttl: float = COUNTS_TTL,
        top: int = TOP_QUEUES,
    ) -> None:
        """Export `jobfsm_jobs{queue,state}` from `counts` (e.g. `engine.counts`), cached
        for `ttl` seconds, the `top` largest queues by name and the rest as "other"."""
        if top < 1:
            raise ValueError(f"top must be at least 1, not {top}")
        self.registry.register(_StoreCounts(counts, ttl, top))

    def watch_limits(self, rows: LimitRows, ttl: float = COUNTS_TTL) -> None:
        """Export `jobfsm_limit_holding{limit}` and `jobfsm_limit_waiting{limit}` from
        `rows` (limit key, holding, waiting), cached for `ttl` seconds."""
        self.registry.register(_StoreLimits(rows, ttl))

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (for a /metrics endpoint)."""
        pc = _client()
        return pc.generate_latest(self.registry), pc.CONTENT_TYPE_LATEST

    def serve(self, port: int, addr: str = "127.0.0.1") -> Callable[[], None]:
        """Serve /metrics over HTTP in a daemon thread; returns a function that stops it."""
        server, thread = _client().start_http_server(port, addr=addr, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5.0)

        return stop
