"""The History page (issue 35 item 3): throughput, failures, retries, recovery events and
queue latency over the last hour or day, per queue and kind, drawn as server-side SVG
bar charts from the store's `History` port (two grouped SQL aggregates over the audit
trail's window; nothing else is read).

What each series counts is decided here from the spec, not by the store:

- *finished*: entries into a terminal state from another state (an operator's erase,
  a terminal state's self-loop, is not a finish);
- *failed*: entries into `failed` from another state;
- *retries*: entries into a state a lease is taken from that is neither the initial
  state nor one jobs are created in (`retry_wait`);
- *recoveries*: entries of the recovery events (`expire`, `reconcile`, `recheck`);
- *queue latency*: first leases (fence 1), the time from the run_after a job was
  submitted with to that lease: mean and longest per bucket.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import attrs

from ..errors import BadInput
from ..lifecycle.spec import Lifecycle
from ..ports.history import EventCount, History, HistoryCounts, HistoryRequest, LatencyCount
from ..service.engine import Engine

#: window label -> (seconds, bucket seconds)
WINDOWS: dict[str, tuple[float, float]] = {"1h": (3600.0, 60.0), "1d": (86400.0, 900.0)}
DEFAULT_WINDOW = "1h"
RECOVERY_EVENTS = ("expire", "reconcile", "recheck")
#: characters of a queue or kind filter
MAX_NAME = 200
#: rows of the per-queue-and-kind table
TABLE_ROWS = 100
#: chart drawing size (SVG user units = CSS pixels at 100%)
CHART_W, CHART_H, PAD_L, PAD_B, PAD_T = 1300, 150, 64, 22, 10

SERIES = (
    ("finished", "finished (entered a terminal state)"),
    ("failed", "failed"),
    ("retries", "retries (entered retry_wait)"),
    ("recoveries", "recovery events (expire, reconcile, recheck)"),
)


@attrs.frozen
class Bar:
    bucket: int
    at: float
    value: float
    x: float
    y: float
    w: float
    h: float
    title: str


@attrs.frozen
class Chart:
    key: str
    title: str
    bars: tuple[Bar, ...]
    total: float
    top: float
    unit: str
    ticks: tuple[tuple[float, str], ...]
    top_label: str = ""


@attrs.frozen
class HistoryView:
    window: str
    since: float
    until: float
    bucket: float
    queue: str
    kind: str
    charts: tuple[Chart, ...]
    #: (queue, kind) -> series -> count, the largest first (at most TABLE_ROWS)
    table: tuple[tuple[str, str, Mapping[str, float]], ...]
    truncated: bool
    available: bool


def classify(lc: Lifecycle) -> dict[tuple[str, str], tuple[str, ...]]:
    """(event, to_state) -> the series an entry of it counts in (see the module doc)."""
    created = {r.dest for r in lc.create_rules}
    lease_from = set(lc.sources("lease")) if "lease" in lc.events else set()
    retry = lease_from - created - {lc.initial}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for rule in lc.rules:
        key = (rule.event, rule.dest)
        series: list[str] = list(out.get(key, ()))
        moves = rule.source != rule.dest
        if moves and rule.dest in lc.terminal and "finished" not in series:
            series.append("finished")
        if moves and rule.dest == "failed" and "failed" not in series:
            series.append("failed")
        if moves and rule.dest in retry and "retries" not in series:
            series.append("retries")
        if rule.event in RECOVERY_EVENTS and "recoveries" not in series:
            series.append("recoveries")
        out[key] = tuple(series)
    return out


def window_of(raw: str | None, now: float) -> tuple[str, HistoryRequest]:
    """The request for a `window` query value, aligned to whole buckets ending after now."""
    label = raw or DEFAULT_WINDOW
    if label not in WINDOWS:
        raise BadInput(f"window must be one of {', '.join(WINDOWS)}, got {label[:20]!r}")
    span, bucket = WINDOWS[label]
    until = math.floor(now / bucket) * bucket + bucket
    return label, HistoryRequest(since=until - span, until=until, bucket=bucket)


def _name(raw: str | None, what: str) -> str:
    value = (raw or "").strip()
    if len(value) > MAX_NAME:
        raise BadInput(f"{what} filter is at most {MAX_NAME} characters")
    return value


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        if value < 1:
            return f"{value * 1000:.0f} ms"
        return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"
    return f"{int(value)}"


def chart(
    key: str, title: str, values: list[float], request: HistoryRequest, unit: str = ""
) -> Chart:
    """Bars for one series, one per bucket, scaled to the largest (geometry only)."""
    n = len(values)
    top = max(values, default=0.0) or 1.0
    inner_w = CHART_W - PAD_L - 28
    inner_h = CHART_H - PAD_T - PAD_B
    step = inner_w / max(n, 1)
    bars = []
    for i, v in enumerate(values):
        h = inner_h * v / top
        at = request.since + i * request.bucket
        bars.append(
            Bar(
                bucket=i,
                at=at,
                value=v,
                x=PAD_L + i * step + 0.5,
                y=PAD_T + inner_h - h,
                w=max(step - 1.0, 1.0),
                h=h,
                title=_fmt(v, unit),
            )
        )
    ticks = tuple(
        (PAD_L + i * step, time.strftime("%H:%M", time.gmtime(request.since + i * request.bucket)))
        for i in range(0, n + 1, max(n // 6, 1))
    )
    return Chart(key, title, tuple(bars), sum(values), top, unit, ticks, _fmt(top, unit))


def history_view(
    engine: Engine, window: str | None, queue: str | None = None, kind: str | None = None
) -> HistoryView:
    """The History page: the store's grouped counts for the window, filtered by queue
    and kind (exact names; empty: all), as charts and a per-queue-and-kind table."""
    label, request = window_of(window, engine.clock.now())
    queue_f, kind_f = _name(queue, "queue"), _name(kind, "kind")
    store = engine.store
    if not isinstance(store, History):
        return HistoryView(label, request.since, request.until, request.bucket, queue_f,
                           kind_f, (), (), False, False)  # fmt: skip
    counts: HistoryCounts = store.history_counts(request)
    kinds = classify(engine.spec)
    per_bucket = {k: [0.0] * request.buckets for k, _t in SERIES}
    table: dict[tuple[str, str], dict[str, float]] = {}

    def wanted(r: EventCount | LatencyCount) -> bool:
        return (not queue_f or r.queue == queue_f) and (not kind_f or r.kind == kind_f)

    for r in counts.events:
        if not wanted(r) or not 0 <= r.bucket < request.buckets:
            continue
        for series in kinds.get((r.event, r.to_state), ()):
            per_bucket[series][r.bucket] += r.count
            row = table.setdefault((r.queue, r.kind), {})
            row[series] = row.get(series, 0) + r.count
    leases = [0] * request.buckets
    waited = [0.0] * request.buckets
    longest = [0.0] * request.buckets
    for lat in counts.latency:
        if not wanted(lat) or not 0 <= lat.bucket < request.buckets:
            continue
        leases[lat.bucket] += lat.count
        waited[lat.bucket] += lat.total
        longest[lat.bucket] = max(longest[lat.bucket], lat.longest)
        row = table.setdefault((lat.queue, lat.kind), {})
        row["leases"] = row.get("leases", 0) + lat.count
        row["waited"] = row.get("waited", 0.0) + lat.total
    charts = [chart(k, t, per_bucket[k], request) for k, t in SERIES]
    mean = [w / n if n else 0.0 for w, n in zip(waited, leases, strict=True)]
    charts.append(chart("latency", "queue latency of first runs, mean", mean, request, "s"))
    charts.append(chart("latency-max", "queue latency of first runs, longest", longest,
                        request, "s"))  # fmt: skip
    rows = sorted(table.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))[:TABLE_ROWS]
    return HistoryView(
        window=label,
        since=request.since,
        until=request.until,
        bucket=request.bucket,
        queue=queue_f,
        kind=kind_f,
        charts=tuple(charts),
        table=tuple((q, k, row) for (q, k), row in rows),
        truncated=counts.truncated,
        available=True,
    )
